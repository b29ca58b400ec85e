// web-shop: the shared contract for built-in environments, plus hand-written checks of rendering,
// the expert's full path at difficulty 3, navigation errors and action parsing.
import { describe, expect, test } from 'vitest';
import webShop from '../../src/env/builtin/web-shop.ts';
import type { ResetOptions, ResetResult, StepResult } from '../../src/env/types.ts';
import { checkBuiltinEnvironment } from '../support/env-contract.ts';

/** web-shop is synchronous (the contract allows promises, this environment never returns one). */
interface SyncShop {
  reset(args: { seed: number; options?: ResetOptions }): ResetResult;
  step(action: string): StepResult;
  validActions(): string[];
  expertAction(): string;
}
const make = () => webShop.make() as unknown as SyncShop;

const HOME_SEED_1 = [
  'Task: Open the product page of the Drift Fedora.',
  'Note: Welcome! Act with: click [N], type [N] TEXT, back.',
  '--- Tidewater Supply | Home ---',
  '[1] link: Home',
  '[2] link: Cart (0)',
  '[3] link: Socks',
  '[4] link: Trousers',
  '[5] link: Hats',
  '[6] link: Bags',
  '[7] input: search (empty)',
  '[8] button: Search',
].join('\n');

describe('web-shop', () => {
  test('meets the built-in environment contract', async () => {
    await checkBuiltinEnvironment(webShop);
  }, 120_000);

  test('renders the home page of a known seed', () => {
    const env = make();
    const { observation, info } = env.reset({ seed: 1 });
    expect(observation).toBe(HOME_SEED_1);
    expect(info.instance).toEqual({ site: '88ead006', task: 'Open the product page of the Drift Fedora.' });
    expect(env.validActions()).toEqual([
      'click [1]', 'click [2]', 'click [3]', 'click [4]', 'click [5]', 'click [6]',
      'type [7] Drift Fedora', 'type [7] Summit Satchel', 'type [7] Lunar Cargo', 'click [8]',
    ]);
  });

  test('the expert buys the right item at difficulty 3 (full transcript)', () => {
    const env = make();
    const reset = env.reset({ seed: 5, options: { difficulty: 3 } });
    expect(reset.info.task).toBe('Buy the Meadow Snood in size Short, shipping to the name Mira Byrne at the address 83 Station Avenue.');
    const actions: string[] = [];
    const pages: unknown[] = [];
    let last: StepResult | undefined;
    for (let t = 0; t < webShop.maxEpisodeSteps; t++) {
      const action = env.expertAction();
      expect(env.validActions()).toContain(action);
      actions.push(action);
      last = env.step(action);
      pages.push(last.info.page);
      if (last.terminated || last.truncated) break;
    }
    expect(actions).toEqual([
      'type [7] Meadow Snood',
      'click [8]', // Search
      'click [3]', // Meadow Snood, the one result
      'click [3]', // Colour: Pink
      'click [5]', // Size: Short
      'click [7]', // Add to cart
      'click [2]', // Cart (1)
      'click [4]', // Checkout
      'type [3] Mira Byrne',
      'type [4] 83 Station Avenue',
      'click [5]', // Place order
    ]);
    expect(pages).toEqual(['home', 'search', 'product', 'product', 'product', 'product', 'cart', 'checkout', 'checkout', 'checkout', 'confirmation']);
    expect(last!.terminated).toBe(true);
    expect(last!.info.success).toBe(true);
    expect(last!.reward).toBeCloseTo(1 - 0.01);
    expect(last!.observation).toContain('--- Foxglove Store | Order confirmation ---');
    expect(last!.observation).toMatch(/Order #\d+ placed, shipping to Mira Byrne at 83 Station Avenue/);
    expect(last!.observation).toContain('1 x Meadow Snood (Pink, Short) - $114');
  });

  test('back at the home page is an invalid action; back after a click returns', () => {
    const env = make();
    env.reset({ seed: 1 });
    const r = env.step('back');
    expect(r.terminated || r.truncated).toBe(false);
    expect(r.reward).toBeCloseTo(-0.06);
    expect(r.observation).toContain('Note: There is no previous page to go back to.');
    expect(r.observation).toContain('| Home ---');
    expect(env.validActions()).not.toContain('back');
    env.step('click [3]');
    expect(env.validActions()).toContain('back');
    const back = env.step('Go back.');
    expect(back.info.page).toBe('home');
    expect(back.reward).toBeCloseTo(-0.01);
  });

  test('clicking a non-existent element explains and penalises', () => {
    const env = make();
    env.reset({ seed: 1 });
    const r = env.step('click [42]');
    expect(r.observation).toContain('There is no element [42] on this page (elements are [1] to [8]).');
    expect(r.reward).toBeCloseTo(-0.06);
    expect(r.terminated).toBe(false);
    expect(r.info.page).toBe('home');
  });

  test('typing into a non-input (and clicking an input) is refused', () => {
    const env = make();
    env.reset({ seed: 1 });
    const r = env.step('type [3] hello');
    expect(r.observation).toContain('[3] is a link, not an input');
    expect(r.reward).toBeCloseTo(-0.06);
    expect(env.step('click [7]').observation).toContain('[7] is an input: use type [7] TEXT.');
    expect(env.step('click [8]').observation).toContain('Type a query into the search input first.');
  });

  test('parses actions robustly and searches', () => {
    const env = make();
    env.reset({ seed: 1 });
    let r = env.step('Type [7] "drift fedora".');
    expect(r.observation).toContain('[7] input: search = "drift fedora"');
    r = env.step('I will click 8 to search');
    expect(r.observation).toContain('Search results for "drift fedora"');
    expect(r.observation).toMatch(/\[3\] link: Drift Fedora - \$\d+/);
    r = env.step('**Click [3].**\nBecause it is the product.');
    expect(r.terminated).toBe(true);
    expect(r.info.success).toBe(true);
    expect(r.observation).toContain('Product: Drift Fedora');
  });

  test('a wrong colour at difficulty 2 ends the episode as a failure', () => {
    const env = make();
    const { info } = env.reset({ seed: 3, options: { difficulty: 2 } });
    const wanted = /in colour (\w+)/.exec(String(info.task))![1];
    let r = env.step(env.expertAction());
    while (r.info.page !== 'product') r = env.step(env.expertAction());
    const lines = r.observation.split('\n');
    const other = lines.find((l) => /button: Colour: /.test(l) && !l.includes(`Colour: ${wanted}`))!;
    const size = lines.find((l) => /button: Size: /.test(l))!;
    const add = lines.find((l) => l.endsWith('button: Add to cart'))!;
    const index = (line: string) => /^\[(\d+)\]/.exec(line)![1];
    expect(env.step('click ' + index(add)).observation).toContain('Note: Choose a colour first.');
    env.step(`click [${index(other)}]`);
    env.step(`click [${index(size)}]`);
    r = env.step(`click [${index(add)}]`);
    expect(r.terminated).toBe(true);
    expect(r.info.success).toBe(false);
    expect(r.reward).toBeCloseTo(-0.51);
    expect(r.observation).toContain('That is not the requested item: task failed.');
  });

  test('a wrong shipping name at difficulty 3 fails; idling is truncated at the step limit', () => {
    const env = make();
    env.reset({ seed: 5, options: { difficulty: 3 } });
    for (let t = 0; t < 8; t++) env.step(env.expertAction()); // to the checkout form
    env.step('type [3] Someone Else');
    env.step('type [4] 83 Station Avenue');
    const r = env.step('click [5]');
    expect(r.terminated).toBe(true);
    expect(r.info.success).toBe(false);
    expect(r.observation).toContain('This order does not match the task: task failed.');

    env.reset({ seed: 5, options: { difficulty: 3 } });
    let last: StepResult | undefined;
    for (let t = 0; t < webShop.maxEpisodeSteps; t++) last = env.step('click [1]');
    expect(last!.truncated).toBe(true);
    expect(last!.terminated).toBe(false);
    expect(last!.info.success).toBe(false);
    expect(last!.observation).toContain('Step limit reached.');
  });
});
