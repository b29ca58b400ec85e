// Share links: the experiment survives the round trip through the URL fragment; damaged, cut-short,
// foreign-version and edited links fail with messages that say so, and no single-character edit
// opens another experiment; a deflate bomb stops at the size cap; setup files read as links do.
import { crc32 } from 'node:zlib';
import { deflateSync, Inflate, strToU8 } from 'fflate';
import { describe, expect, test } from 'vitest';
import { ENV_TEMPLATE } from '../../src/app/env-template.ts';
import { isUncheckedShareFragment, MAX_LINK_LENGTH, MAX_SETUP_BYTES, MAX_SETUP_FILE_BYTES, readSetupFile, readShareFragment, setupJson, shareLink, ShareLinkError, type SharedExperiment } from '../../src/app/share.ts';

// How many bytes fflate's streaming inflater hands out, to measure how far a bomb inflates.
let inflated = 0;
const push = Inflate.prototype.push;
Inflate.prototype.push = function (this: Inflate, chunk: Uint8Array, final?: boolean) {
  const handler = this.ondata;
  this.ondata = (data, last) => {
    inflated += data.length;
    handler(data, last);
  };
  try {
    push.call(this, chunk, final);
  } finally {
    this.ondata = handler;
  }
};

/** A checked fragment as shareLink writes one (deflated bytes, then the CRC-32 of what they inflate to), for any content. */
function checkedFragment(content: Uint8Array): string {
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(content));
  return `#s=${Buffer.concat([deflateSync(content, { level: 9 }), crc]).toString('base64url')}`;
}

const experiment: SharedExperiment = {
  model: 'https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct/resolve/main/',
  env: 'tool-use',
  mode: 'choice',
  algo: 'ppo',
  algorithm: { clipCoef: 0.1, adaptiveKlTarget: null, normalizeAdvantages: false },
  episodes: 500,
  seed: 7,
  loraR: 16,
};

describe('share links', () => {
  test('round trip through the fragment, which replaces any earlier one', () => {
    const link = shareLink('https://rlplay.example/app/?model=x#old', experiment);
    const url = new URL(link);
    expect(url.pathname).toBe('/app/');
    expect(url.search).toBe('?model=x');
    expect(url.hash.startsWith('#s=')).toBe(true);
    expect(isUncheckedShareFragment(url.hash)).toBe(false);
    expect(link.length).toBeLessThan(MAX_LINK_LENGTH);
    expect(readShareFragment(url.hash)).toEqual(experiment);
    const withLora: SharedExperiment = { ...experiment, loraAlpha: 8, loraTargets: ['q_proj', 'v_proj'] };
    expect(readShareFragment(new URL(shareLink('https://rlplay.example/', withLora)).hash)).toEqual(withLora);
  });

  test('a fragment without an experiment is not an error', () => {
    expect(readShareFragment('')).toBeNull();
    expect(readShareFragment('#section')).toBeNull();
  });

  test('a link cut short or damaged says so', () => {
    const hash = new URL(shareLink('https://rlplay.example/', experiment)).hash;
    for (const broken of [hash.slice(0, hash.length - 12), `${hash.slice(0, 20)}!!${hash.slice(22)}`, '#x=']) {
      expect(() => readShareFragment(broken)).toThrow(ShareLinkError);
      expect(() => readShareFragment(broken)).toThrow(/damaged or cut short|incomplete/);
    }
  });

  const encode = (value: unknown) => `#x=${Buffer.from(deflateSync(strToU8(JSON.stringify(value)))).toString('base64url')}`;

  test('a link made under earlier algorithm defaults reproduces its experiment under today\'s', () => {
    // Links without `defaults` predate it: version 1, before learning-rate annealing and PPO's 1e-3.
    expect(readShareFragment(encode({ ...experiment, v: 1 }))!.algorithm).toEqual({ learningRate: 3e-3, annealLearningRate: false, ...experiment.algorithm });
    // Settings the link names win; DQN's defaults did not change, so its links need nothing added.
    expect(readShareFragment(encode({ ...experiment, v: 1, algo: 'reinforce', algorithm: { annealLearningRate: true } }))!.algorithm).toEqual({ annealLearningRate: true });
    expect(readShareFragment(encode({ ...experiment, v: 1, algo: 'dqn', algorithm: {} }))!.algorithm).toEqual({});
    // Links made before settings were renamed (version 2) open under today's names.
    expect(readShareFragment(encode({ ...experiment, v: 1, defaults: 2, algorithm: { klTarget: 2, targetKl: null } }))!.algorithm).toEqual({ adaptiveKlTarget: 2, earlyStopKl: null });
    expect(readShareFragment(encode({ ...experiment, v: 1, defaults: 2, algo: 'grpo', algorithm: { klCoefficient: 0.1 } }))!.algorithm).toEqual({ klCoef: 0.1 });
    // Today's links say which defaults they were made with, and read back as they were written.
    const link = shareLink('https://rlplay.example/', experiment);
    expect(readShareFragment(new URL(link).hash)!.algorithm).toEqual(experiment.algorithm);
    expect(() => readShareFragment(encode({ ...experiment, v: 1, defaults: 99 }))).toThrow(/made by a newer rlplay \(algorithm defaults version 99/);
    expect(() => readShareFragment(encode({ ...experiment, v: 1, defaults: 'x' }))).toThrow(/bad defaults/);
  });

  test('another format version, and an edited experiment, are named', () => {
    expect(() => readShareFragment(encode({ ...experiment, v: 99 }))).toThrow(/another version of rlplay \(format 99/);
    expect(() => readShareFragment(encode({ ...experiment, v: 1, episodes: -3, mode: 'dance' }))).toThrow(/bad mode, episodes/);
    expect(() => readShareFragment(encode({ ...experiment, v: 1, loraAlpha: 0, loraTargets: ['q_proj', 'lm_head'] }))).toThrow(/bad loraAlpha, loraTargets/);
    expect(() => readShareFragment(encode({ ...experiment, v: 1, loraTargets: [] }))).toThrow(/bad loraTargets/);
  });

  test('no single-character edit of a real link opens another experiment', () => {
    const real: SharedExperiment = { ...experiment, model: 'http://127.0.0.1:5173/models/rlplay-agent-mini/', env: 'largest-number', envSource: ENV_TEMPLATE, loraAlpha: 32, loraTargets: ['q_proj', 'v_proj'] };
    const hash = new URL(shareLink('https://rlplay.example/', real)).hash;
    // Every base64url character in every position, and a deletion and a few insertions at each.
    const characters = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const edits: string[] = [];
    for (let i = 0; i < hash.length; i++) {
      edits.push(hash.slice(0, i) + hash.slice(i + 1));
      for (const c of characters) if (c !== hash[i]) edits.push(hash.slice(0, i) + c + hash.slice(i + 1));
      for (const c of 'A_0=') edits.push(hash.slice(0, i) + c + hash.slice(i));
    }
    let same = 0;
    let notALink = 0;
    for (const edited of edits) {
      let read: SharedExperiment | null;
      try {
        read = readShareFragment(edited);
      } catch (error) {
        // Rejected, always by a ShareLinkError (a message for the page), never a TypeError or the like.
        if (!(error instanceof ShareLinkError)) throw new Error(`${edited}: ${(error as Error).message}`);
        continue;
      }
      // An edited prefix is no share link at all: the page opens without an experiment.
      if (read === null) {
        notALink++;
      } else {
        expect(read, edited).toEqual(real);
        same++;
      }
    }
    expect(edits.length).toBeGreaterThan(80_000);
    // Edits that change nothing (the last character's spare bits, '+' for '-') are few.
    expect(same).toBeLessThan(edits.length / 100);
    expect(notALink).toBeLessThan(edits.length / 100);
  });

  test('a payload that is not an object is named, not a TypeError', () => {
    const checked = (value: unknown) => checkedFragment(strToU8(JSON.stringify(value)));
    expect(() => readShareFragment(checked(null))).toThrow(/This share link holds null, not an experiment/);
    expect(() => readShareFragment(encode(null))).toThrow(/This share link holds null, not an experiment/);
    expect(() => readShareFragment(checked([1]))).toThrow(/holds a list/);
    expect(() => readShareFragment(checked('x'))).toThrow(/holds a string/);
  });

  test('a link whose checksum does not match what it inflates to is refused', () => {
    const hash = new URL(shareLink('https://rlplay.example/', experiment)).hash;
    const bytes = Buffer.from(hash.slice(3), 'base64url');
    bytes[bytes.length - 1] ^= 1;
    expect(() => readShareFragment(`#s=${bytes.toString('base64url')}`)).toThrow(/damaged or cut short/);
    // Every length of the JSON, whichever step of the streaming inflater its end falls in, reads back.
    for (let length = 0; length < 600; length += 7) {
      const sized: SharedExperiment = { ...experiment, env: 'largest-number', envSource: 'x'.repeat(length) };
      expect(readShareFragment(new URL(shareLink('https://rlplay.example/', sized)).hash)).toEqual(sized);
    }
  });

  test('a deflate bomb is rejected before it inflates past the cap', () => {
    // 64 MiB of zeros deflate to 64 KiB: longer than any link, refused before inflating a byte.
    inflated = 0;
    const bomb = checkedFragment(new Uint8Array(64 << 20));
    expect(bomb.length).toBeGreaterThan(80_000);
    expect(() => readShareFragment(bomb)).toThrow(/more than the 8000 of any link rlplay makes/);
    expect(inflated).toBe(0);
    // 5 MiB within a link's length, checked or not: inflation stops within one step (512 input bytes) of the cap.
    const zeros = new Uint8Array(5 << 20);
    for (const link of [checkedFragment(zeros), `#x=${Buffer.from(deflateSync(zeros, { level: 9 })).toString('base64url')}`]) {
      inflated = 0;
      expect(link.length).toBeLessThan(MAX_LINK_LENGTH);
      expect(() => readShareFragment(link)).toThrow(/inflates to more than 256 KiB/);
      expect(inflated).toBeGreaterThan(MAX_SETUP_BYTES);
      expect(inflated).toBeLessThan(MAX_SETUP_BYTES + (600 << 10));
    }
  });

  test('a setup file holds the link\'s JSON and reads back the same, with its problems named', async () => {
    const withSource: SharedExperiment = { ...experiment, env: 'largest-number', envSource: ENV_TEMPLATE };
    const file = (name: string, text: string) => new File([text], name);
    expect(await readSetupFile(file('rlplay-experiment.json', setupJson(withSource, 2)))).toEqual(withSource);
    await expect(readSetupFile(file('notes.txt', 'hello'))).rejects.toThrow(/notes.txt is not a setup file: it is not valid JSON/);
    await expect(readSetupFile(file('null.json', 'null'))).rejects.toThrow(/This setup file null.json holds null, not an experiment/);
    await expect(readSetupFile(file('old.json', JSON.stringify(experiment)))).rejects.toThrow(/This setup file old.json records no format version \(v\)/);
    await expect(readSetupFile(file('x.json', JSON.stringify({ ...experiment, v: 1, seed: 'a' })))).rejects.toThrow(/This setup file x.json's experiment is incomplete or edited \(bad seed\)/);
    await expect(readSetupFile(file('big.json', ' '.repeat(MAX_SETUP_FILE_BYTES + 1)))).rejects.toThrow(/big.json is 4194305 bytes, more than the 4 MiB of any setup file/);
  });

  test('a link from before the checksum opens, and is known to be unchecked', () => {
    const old = encode({ ...experiment, v: 1, defaults: 2 });
    expect(isUncheckedShareFragment(old)).toBe(true);
    expect(readShareFragment(old)).toEqual(experiment);
  });
});
