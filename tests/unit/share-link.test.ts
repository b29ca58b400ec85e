// Share links: the experiment survives the round trip through the URL fragment; damaged, cut-short,
// foreign-version and edited links fail with messages that say so.
import { deflateSync, strToU8 } from 'fflate';
import { describe, expect, test } from 'vitest';
import { MAX_LINK_LENGTH, readShareFragment, shareLink, ShareLinkError, type SharedExperiment } from '../../src/app/share.ts';

const experiment: SharedExperiment = {
  model: 'https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct/resolve/main/',
  env: 'tool-use',
  mode: 'choice',
  algo: 'ppo',
  algorithm: { clipCoef: 0.1, klTarget: null, normalizeAdvantages: false },
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
    expect(url.hash.startsWith('#x=')).toBe(true);
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
});
