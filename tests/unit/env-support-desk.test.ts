import { describe, expect, it } from 'vitest';
import supportDesk from '../../src/env/builtin/support-desk.ts';
import type { ResetOptions, StepResult } from '../../src/env/types.ts';
import { checkBuiltinEnvironment } from '../support/env-contract.ts';

/** The first test-split seed whose case matches `want` (by its hidden kind and the opening text). */
function findCase(options: ResetOptions, want: (kind: string, observation: string) => boolean) {
  for (let seed = 0; seed < 2000; seed++) {
    const env = supportDesk.make();
    const { observation } = env.reset({ seed, options }) as { observation: string };
    if (want((env.hiddenState() as { kind: string }).kind, observation)) return { env, observation, seed };
  }
  throw new Error('no such case');
}

const opening = (observation: string) => observation.slice(observation.lastIndexOf('Customer: '));
const orderIdIn = (text: string) => /ORD-\d{5}/.exec(text)![0];

describe('support-desk', () => {
  it('meets the built-in environment contract', async () => {
    await checkBuiltinEnvironment(supportDesk);
  });

  it('opens with the rules, the action format and a known customer message for a known seed', () => {
    const env = supportDesk.make();
    const { observation, info } = env.reset({ seed: 5, options: { split: 'test', difficulty: 1 } }) as { observation: string; info: Record<string, unknown> };
    expect(observation).toContain('Refunds only for delivered orders, within 30 days of delivery');
    expect(observation).toContain('change_address: <order id> | <new address>');
    expect(opening(observation)).toBe(
      'Customer: "Hi, I need to change the delivery address for the yoga mat from order ORD-73816 to 22 Maple Avenue, Oakdale. My email is hana.haddad90@mail.example."',
    );
    expect(info.instance).toEqual({ difficulty: 1, id: expect.any(Number) });
    expect((info.instance as { id: number }).id % 2).toBe(1); // test instances are odd
  });

  it('requires verification before sharing an order status', () => {
    // A status request where the customer gave the order number but not the email.
    const { env, observation, seed } = findCase({ split: 'test', difficulty: 2 }, (kind, obs) => kind === 'status' && /ORD-\d{5}/.test(opening(obs)) && !opening(obs).includes('My email is'));
    const id = orderIdIn(opening(observation));
    env.step(`lookup: ${id}`); // looking it up is internal and fine
    const early = env.step(`status: ${id}`) as StepResult;
    expect(early.terminated).toBe(true);
    expect(early.info.success).toBe(false);
    expect(early.reward).toBeLessThan(0);
    expect(early.observation).toContain('rule 1');

    // The same case, worked by the rules: ask for the email, then share the status.
    const again = supportDesk.make();
    again.reset({ seed, options: { split: 'test', difficulty: 2 } });
    expect(again.expertAction()).toMatch(/^ask: .*email/);
    const answer = again.step(again.expertAction()) as StepResult;
    expect(answer.observation).toMatch(/My email is \S+@/);
    again.step(`lookup: ${id}`);
    const done = again.step(`status: ${id}`) as StepResult;
    expect(done.terminated).toBe(true);
    expect(done.info.success).toBe(true);
    expect(done.reward).toBeCloseTo(0.99) // +1 minus this step's cost;
  });

  it('ends the episode with success false when a rule is broken', () => {
    // Refunding an item delivered more than 30 days ago.
    const late = findCase({ split: 'test', difficulty: 3 }, (kind) => kind === 'refund-late');
    while (!late.env.expertAction().startsWith('lookup')) late.env.step(late.env.expertAction());
    const lookup = late.env.expertAction();
    late.env.step(lookup);
    expect(late.env.expertAction()).toMatch(/^decline: .*more than 30 days/);
    const refund = late.env.step(`refund: ${lookup.slice('lookup: '.length)}`) as StepResult;
    expect(refund).toMatchObject({ terminated: true, truncated: false, info: { success: false } });
    expect(refund.reward).toBeLessThan(0);
    expect(refund.observation).toContain('rule 2');

    // Changing the address of an order that has shipped.
    const shipped = findCase({ split: 'test', difficulty: 3 }, (kind) => kind === 'address-shipped');
    while (!shipped.env.expertAction().startsWith('decline')) shipped.env.step(shipped.env.expertAction());
    const id = orderIdIn((shipped.env.validActions!() as string[]).find((a) => a.startsWith('lookup'))!);
    const change = shipped.env.step(`change_address: ${id} | 1 New Street, Springfield`) as StepResult;
    expect(change).toMatchObject({ terminated: true, info: { success: false } });
    expect(change.reward).toBeLessThan(0);
    expect(change.observation).toContain('rule 3');
  });

  it('escalates when the customer asks for a manager, and acting otherwise breaks a rule', () => {
    const { env, observation } = findCase({ split: 'test', difficulty: 3 }, (kind, obs) => kind === 'manager' && /ORD-\d{5}.*My email is/.test(opening(obs)));
    expect(opening(observation)).toContain('manager');
    expect(env.expertAction()).toBe('escalate');
    const id = orderIdIn(opening(observation));
    env.step(`lookup: ${id}`);
    const wrong = env.step(`status: ${id}`) as StepResult;
    expect(wrong).toMatchObject({ terminated: true, info: { success: false } });
    expect(wrong.reward).toBeLessThan(0);
  });

  it('declines a rule-breaking request politely and counts that as success', () => {
    const { env } = findCase({ split: 'test', difficulty: 3 }, (kind) => kind === 'refund-opened');
    let result: StepResult | undefined;
    for (let t = 0; t < supportDesk.maxEpisodeSteps && !result?.terminated; t++) result = env.step(env.expertAction()) as StepResult;
    expect(result!.info.success).toBe(true);
    expect(result!.observation).toContain('declined');
  });

  it('parses sloppy actions and offers a short list of plausible actions', () => {
    const { env, observation } = findCase({ split: 'train', difficulty: 1 }, (kind) => kind === 'refund');
    const id = orderIdIn(opening(observation));
    const actions = (env.validActions!() as string[]);
    expect(actions.length).toBeLessThanOrEqual(10);
    expect(actions).toContain(env.expertAction());
    expect(actions).toContain(`refund: ${id}`); // refunding before the lookup is a plausible mistake
    const looked = env.step(`I'll check the order first.\n**LOOKUP**:  ord ${id.slice(4)}`) as StepResult;
    expect(looked.observation).toContain(`Order ${id}: item:`);
    const nonsense = env.step('hello?') as StepResult;
    expect(nonsense).toMatchObject({ terminated: false, reward: -0.01 });
    expect(nonsense.observation).toContain('unrecognised action');
    const refund = env.step(`Refund: #${id.slice(4)}.`) as StepResult;
    expect(refund).toMatchObject({ terminated: true, info: { success: true } });
  });

  it('truncates after maxEpisodeSteps with success false', () => {
    const env = supportDesk.make();
    env.reset({ seed: 3 });
    let result: StepResult | undefined;
    for (let t = 0; t < supportDesk.maxEpisodeSteps; t++) result = env.step('reply: One moment please.') as StepResult;
    expect(result).toMatchObject({ terminated: false, truncated: true, info: { success: false } });
  });
});
