// web-shop: web navigation on a small, seeded shop site rendered as text.
//
// Every page is a list of numbered elements (`[3] link: Shoes`, `[7] input: search`, `[8] button:
// Add to cart`); the agent acts with `click [N]`, `type [N] TEXT` and `back` (a history stack).
// Each episode draws a site (categories, products with prices, colours, sizes and stock) and a task:
//   difficulty 1: open the product page of X;
//   difficulty 2: add X in colour Y to the cart;
//   difficulty 3: buy X in size Z, shipping to name N at address A (cart, checkout form, place order).
// Rewards: +1 when the task is done (terminated, success), a small cost per step, a larger one for an
// invalid or malformed action (the episode goes on, the observation says what went wrong), and -0.5
// with the episode ended for an irreversible mistake (the wrong item added at difficulty 2, a wrong
// order placed). Train and test instances are told apart by a hash class of the generated
// (site, task), so the two splits never share an instance; info.instance identifies it.
// Pure TypeScript with no Node-only APIs: it runs in the browser too.
import { parseCommand } from '../text-actions.ts';
import type { BuiltinEnvModule, Env, EnvInfo, ExpertEnv, ResetOptions, ResetResult, Split, StepResult } from '../types.ts';
import { hashString, mulberry32 } from '../../common/random.ts';

const MAX_STEPS = 15;
const STEP_COST = -0.01;
const INVALID_COST = -0.05;
const MISTAKE_REWARD = -0.5;
const SUCCESS_REWARD = 1;
const MAX_TYPED = 80;

// ---------------------------------------------------------------------------------------------
// Seeded randomness



const pick = <T>(rng: () => number, items: readonly T[]): T => items[Math.floor(rng() * items.length)];

/** k distinct items in random order (partial Fisher-Yates on a copy). */
function sample<T>(rng: () => number, items: readonly T[], k: number): T[] {
  const copy = items.slice();
  for (let i = 0; i < k; i++) {
    const j = i + Math.floor(rng() * (copy.length - i));
    [copy[i], copy[j]] = [copy[j], copy[i]];
  }
  return copy.slice(0, k);
}

// ---------------------------------------------------------------------------------------------
// Site and task

interface CategorySpec {
  name: string;
  nouns: string[];
  sizes: string[];
}

const CATEGORY_POOL: CategorySpec[] = [
  { name: 'Shoes', nouns: ['Runner', 'Sneaker', 'Loafer', 'Boot', 'Sandal', 'Trainer'], sizes: ['38', '39', '40', '41', '42', '43', '44'] },
  { name: 'Shirts', nouns: ['Tee', 'Polo', 'Oxford', 'Henley', 'Flannel', 'Tunic'], sizes: ['XS', 'S', 'M', 'L', 'XL'] },
  { name: 'Jackets', nouns: ['Parka', 'Anorak', 'Blazer', 'Bomber', 'Windbreaker', 'Fleece'], sizes: ['XS', 'S', 'M', 'L', 'XL'] },
  { name: 'Hats', nouns: ['Beanie', 'Cap', 'Fedora', 'Bucket Hat', 'Beret', 'Visor'], sizes: ['S', 'M', 'L'] },
  { name: 'Bags', nouns: ['Backpack', 'Tote', 'Duffel', 'Satchel', 'Messenger', 'Sling'], sizes: ['Small', 'Medium', 'Large'] },
  { name: 'Trousers', nouns: ['Chino', 'Jogger', 'Cargo', 'Slacks', 'Corduroy', 'Denim'], sizes: ['28', '30', '32', '34', '36'] },
  { name: 'Socks', nouns: ['Crew Sock', 'Ankle Sock', 'Wool Sock', 'Hiker Sock', 'Dress Sock', 'Trail Sock'], sizes: ['S', 'M', 'L'] },
  { name: 'Scarves', nouns: ['Wrap', 'Shawl', 'Muffler', 'Snood', 'Stole', 'Bandana'], sizes: ['Short', 'Long'] },
];
const ADJECTIVES = ['Alpine', 'Urban', 'Classic', 'Summit', 'Breeze', 'Nova', 'Coastal', 'Velvet', 'Canyon', 'Harbor', 'Meadow', 'Ember', 'Polar', 'Drift', 'Cedar', 'Lunar', 'Orbit', 'Willow', 'Granite', 'Sierra'];
const COLOURS = ['Red', 'Blue', 'Green', 'Black', 'White', 'Grey', 'Navy', 'Yellow', 'Brown', 'Pink', 'Olive', 'Teal'];
const SHOP_NAMES = ['Northwind Outfitters', 'Maple & Co', 'Bluebird Goods', 'Tidewater Supply', 'Foxglove Store', 'Juniper Market'];
const FIRST_NAMES = ['Ada', 'Ben', 'Chloe', 'Dev', 'Elena', 'Farid', 'Grace', 'Hugo', 'Iris', 'Jonas', 'Kemi', 'Liam', 'Mira', 'Noah', 'Olga', 'Priya'];
const LAST_NAMES = ['Park', 'Okafor', 'Silva', 'Novak', 'Haddad', 'Larsen', 'Moreau', 'Tanaka', 'Reyes', 'Byrne', 'Kowalski', 'Mensah'];
const STREETS = ['Elm Street', 'Harbour Road', 'Mill Lane', 'Station Avenue', 'Orchard Way', 'Quarry Hill', 'Bridge Street', 'Kings Row'];

const CATEGORIES_PER_SITE = 4;
const PRODUCTS_PER_CATEGORY = 4;

interface Product {
  id: number;
  name: string;
  category: number;
  price: number;
  colours: string[];
  sizes: string[];
  stock: number;
}

interface Site {
  shop: string;
  categories: string[];
  products: Product[];
}

interface Task {
  difficulty: number;
  product: number;
  colour?: string;
  size?: string;
  shipName?: string;
  address?: string;
  text: string;
}

/** Values offered for `type` in validActions(): the task's own values plus a few distractors. */
interface Suggestions {
  search: string[];
  name: string[];
  address: string[];
}

function makeSite(rng: () => number): Site {
  const specs = sample(rng, CATEGORY_POOL, CATEGORIES_PER_SITE);
  const adjectives = sample(rng, ADJECTIVES, CATEGORIES_PER_SITE * PRODUCTS_PER_CATEGORY);
  const products: Product[] = [];
  specs.forEach((spec, category) => {
    const nouns = sample(rng, spec.nouns, PRODUCTS_PER_CATEGORY);
    for (const noun of nouns) {
      const id = products.length;
      products.push({
        id,
        name: `${adjectives[id]} ${noun}`,
        category,
        price: 9 + Math.floor(rng() * 110),
        colours: sample(rng, COLOURS, 2 + Math.floor(rng() * 2)),
        sizes: sample(rng, spec.sizes, Math.min(spec.sizes.length, 2 + Math.floor(rng() * 2))).sort((a, b) => spec.sizes.indexOf(a) - spec.sizes.indexOf(b)),
        stock: rng() < 0.2 ? 0 : 1 + Math.floor(rng() * 9),
      });
    }
  });
  return { shop: pick(rng, SHOP_NAMES), categories: specs.map((s) => s.name), products };
}

function makeTask(rng: () => number, site: Site, difficulty: number): Task {
  const inStock = site.products.filter((p) => p.stock > 0);
  const product = pick(rng, inStock.length > 0 ? inStock : site.products);
  if (product.stock === 0) product.stock = 1;
  if (difficulty === 1) return { difficulty, product: product.id, text: `Open the product page of the ${product.name}.` };
  if (difficulty === 2) {
    const colour = pick(rng, product.colours);
    return { difficulty, product: product.id, colour, text: `Add the ${product.name} in colour ${colour} to the cart.` };
  }
  const size = pick(rng, product.sizes);
  const shipName = `${pick(rng, FIRST_NAMES)} ${pick(rng, LAST_NAMES)}`;
  const address = `${1 + Math.floor(rng() * 98)} ${pick(rng, STREETS)}`;
  return {
    difficulty,
    product: product.id,
    size,
    shipName,
    address,
    text: `Buy the ${product.name} in size ${size}, shipping to the name ${shipName} at the address ${address}.`,
  };
}

function makeSuggestions(rng: () => number, site: Site, task: Task): Suggestions {
  const target = site.products[task.product];
  const others = sample(rng, site.products.filter((p) => p.id !== target.id), 2).map((p) => p.name);
  const names = new Set([task.shipName ?? `${pick(rng, FIRST_NAMES)} ${pick(rng, LAST_NAMES)}`]);
  while (names.size < 3) names.add(`${pick(rng, FIRST_NAMES)} ${pick(rng, LAST_NAMES)}`);
  const addresses = new Set([task.address ?? `${1 + Math.floor(rng() * 98)} ${pick(rng, STREETS)}`]);
  while (addresses.size < 2) addresses.add(`${1 + Math.floor(rng() * 98)} ${pick(rng, STREETS)}`);
  return { search: sample(rng, [target.name, ...others], 3), name: sample(rng, [...names], 3), address: sample(rng, [...addresses], 2) };
}

// ---------------------------------------------------------------------------------------------
// Pages and elements

type Page =
  | { kind: 'home'; search: string }
  | { kind: 'category'; category: number }
  | { kind: 'search'; query: string }
  | { kind: 'product'; product: number; colour: string | null; size: string | null }
  | { kind: 'cart' }
  | { kind: 'checkout'; name: string; address: string }
  | { kind: 'confirmation'; name: string; address: string };

type Effect =
  | { type: 'goto'; page: Page }
  | { type: 'search' }
  | { type: 'colour'; value: string }
  | { type: 'size'; value: string }
  | { type: 'add' }
  | { type: 'remove'; line: number }
  | { type: 'checkout' }
  | { type: 'place' };

type Element =
  | { kind: 'link' | 'button'; label: string; effect: Effect }
  | { kind: 'input'; label: string; field: 'search' | 'name' | 'address'; value: string };

interface CartLine {
  product: number;
  colour: string;
  size: string;
  quantity: number;
}

const HOME: Page = { kind: 'home', search: '' };

function norm(text: string): string {
  return text.toLowerCase().replace(/\s+/g, ' ').replace(/^[\s"'`.,;:!?]+|[\s"'`.,;:!?]+$/g, '');
}

function searchProducts(site: Site, query: string): Product[] {
  const words = norm(query).split(' ').filter((w) => w.length > 0);
  if (words.length === 0) return [];
  return site.products.filter((p) => {
    const hay = `${p.name} ${site.categories[p.category]}`.toLowerCase();
    return words.every((w) => hay.includes(w));
  });
}

// ---------------------------------------------------------------------------------------------
// Action parsing: the shared helper finds the verb anywhere in the first line (or the whole text);
// here we only read the `[N]` and the typed text. "click 3", "Click [3].", "type [7] red shoes".

type Parsed = { verb: 'click'; index: number } | { verb: 'type'; index: number; text: string } | { verb: 'back' };

const VERBS = { click: ['click', 'press', 'select'], type: ['type', 'enter', 'fill'], back: ['back', 'go back'] };

function parseAction(action: string): Parsed | null {
  const command = parseCommand(action, VERBS);
  if (!command) return null;
  if (command.verb === 'back') return { verb: 'back' };
  const m = /^(?:on\s+|into\s+|in\s+)?\[?\s*(\d{1,4})\s*\]?\s*[:,]?\s*([\s\S]*)$/i.exec(command.argument);
  if (!m) return null;
  const index = Number(m[1]);
  if (command.verb === 'click') return { verb: 'click', index };
  const text = m[2].trim().replace(/^["'`]+|["'`]+$/g, '').replace(/\s+/g, ' ').trim();
  return { verb: 'type', index, text: text.slice(0, MAX_TYPED) };
}

// ---------------------------------------------------------------------------------------------
// The environment

class WebShopEnv implements Env, ExpertEnv {
  private site!: Site;
  private task!: Task;
  private suggestions!: Suggestions;
  private instance!: { site: string; task: string };
  private page: Page = HOME;
  private history: Page[] = [];
  private cart: CartLine[] = [];
  private orderNumber = 0;
  private steps = 0;
  private done = true;

  reset({ seed, options }: { seed: number; options?: ResetOptions }): ResetResult {
    const split: Split = options?.split === 'test' ? 'test' : 'train';
    const d = Math.round(Number(options?.difficulty ?? 1));
    const difficulty = Number.isFinite(d) ? Math.min(3, Math.max(1, d)) : 1;
    const rng = mulberry32(seed);
    // Draw (site, task) pairs until one falls in this split's hash class.
    for (;;) {
      const site = makeSite(rng);
      const task = makeTask(rng, site, difficulty);
      const siteId = hashString(JSON.stringify(site)).toString(16).padStart(8, '0');
      const instance = { site: siteId, task: task.text };
      if ((hashString(JSON.stringify(instance)) & 1) === (split === 'test' ? 1 : 0)) {
        this.site = site;
        this.task = task;
        this.instance = instance;
        break;
      }
    }
    this.suggestions = makeSuggestions(rng, this.site, this.task);
    this.orderNumber = 1000 + Math.floor(rng() * 9000);
    this.page = HOME;
    this.history = [];
    this.cart = [];
    this.steps = 0;
    this.done = false;
    return { observation: this.render('Welcome! Act with: click [N], type [N] TEXT, back.'), info: this.info() };
  }

  step(action: string): StepResult {
    if (this.done) return this.result('The episode is over; call reset().', 0, true, { success: false });
    this.steps++;
    const outcome = this.apply(typeof action === 'string' ? action : String(action));
    let reward = STEP_COST + (outcome.invalid ? INVALID_COST : 0);
    let terminated = false;
    const extra: EnvInfo = {};
    if (outcome.end) {
      terminated = true;
      reward += outcome.end === 'success' ? SUCCESS_REWARD : MISTAKE_REWARD;
      extra.success = outcome.end === 'success';
    }
    const truncated = !terminated && this.steps >= MAX_STEPS;
    if (truncated) extra.success = false;
    this.done = terminated || truncated;
    const note = truncated ? `${outcome.message} Step limit reached.` : outcome.message;
    return this.result(note, reward, terminated, extra, truncated);
  }

  validActions(): string[] {
    if (this.done) return [];
    const actions: string[] = [];
    this.elements().forEach((el, i) => {
      const n = i + 1;
      if (el.kind === 'input') for (const value of this.suggestions[el.field]) actions.push(`type [${n}] ${value}`);
      else actions.push(`click [${n}]`);
    });
    if (this.history.length > 0) actions.push('back');
    return actions;
  }

  /** A scripted path that reads the hidden task and site: search, open, choose, add, check out. */
  expertAction(): string {
    const task = this.task;
    const target = this.site.products[task.product];
    const els = this.elements();
    const find = (pred: (el: Element) => boolean): number => els.findIndex(pred) + 1;
    const click = (n: number) => `click [${n}]`;
    const byEffect = (pred: (e: Effect) => boolean) => find((el) => el.kind !== 'input' && pred(el.effect));
    const page = this.page;

    if (task.difficulty === 3) {
      const wrong = this.cart.findIndex((l) => l.product !== target.id || l.size !== task.size);
      if (wrong >= 0) {
        if (page.kind === 'cart') return click(byEffect((e) => e.type === 'remove' && e.line === wrong));
        return click(byEffect((e) => e.type === 'goto' && e.page.kind === 'cart'));
      }
      if (this.cart.length > 0) {
        if (page.kind === 'checkout') {
          if (norm(page.name) !== norm(task.shipName!)) return `type [${find((el) => el.kind === 'input' && el.field === 'name')}] ${task.shipName}`;
          if (norm(page.address) !== norm(task.address!)) return `type [${find((el) => el.kind === 'input' && el.field === 'address')}] ${task.address}`;
          return click(byEffect((e) => e.type === 'place'));
        }
        if (page.kind === 'cart') return click(byEffect((e) => e.type === 'checkout'));
        return click(byEffect((e) => e.type === 'goto' && e.page.kind === 'cart'));
      }
    }
    if (page.kind === 'product' && page.product === target.id) {
      const colour = task.colour ?? target.colours[0];
      const size = task.size ?? target.sizes[0];
      if (page.colour !== colour) return click(byEffect((e) => e.type === 'colour' && e.value === colour));
      if (page.size !== size) return click(byEffect((e) => e.type === 'size' && e.value === size));
      return click(byEffect((e) => e.type === 'add'));
    }
    // To the product: search for its name from the task, then open the one result. Browsing its
    // category would be a step shorter, but which category a product is in is not in the task: a
    // policy would have to learn the shop's catalogue, where searching needs only copying the name.
    const toProduct = byEffect((e) => e.type === 'goto' && e.page.kind === 'product' && e.page.product === target.id);
    if (toProduct > 0) return click(toProduct);
    if (page.kind === 'home') {
      if (norm(page.search) !== norm(target.name)) return `type [${find((el) => el.kind === 'input' && el.field === 'search')}] ${target.name}`;
      return click(byEffect((e) => e.type === 'search'));
    }
    return click(byEffect((e) => e.type === 'goto' && e.page.kind === 'home'));
  }

  hiddenState(): { site: Site; task: Task; orderNumber: number } {
    return { site: this.site, task: this.task, orderNumber: this.orderNumber };
  }

  close(): void {
    this.done = true;
  }

  // --- internals --------------------------------------------------------------------------------

  private info(extra: EnvInfo = {}): EnvInfo {
    return { instance: this.instance, difficulty: this.task.difficulty, task: this.task.text, page: this.page.kind, steps: this.steps, ...extra };
  }

  private result(message: string, reward: number, terminated: boolean, extra: EnvInfo, truncated = false): StepResult {
    return { observation: this.render(message), reward, terminated, truncated, info: this.info(extra) };
  }

  private navigate(page: Page): void {
    this.history.push(this.page);
    this.page = page;
  }

  /** Apply one action; `end` set when the episode terminates. */
  private apply(action: string): { message: string; invalid?: boolean; end?: 'success' | 'failure' } {
    const parsed = parseAction(action);
    if (!parsed) {
      const shown = action.trim().slice(0, 40).replace(/[\u0000-\u001f]/g, '?');
      return { invalid: true, message: `Could not understand the action "${shown}". Use: click [N], type [N] TEXT, or back.` };
    }
    if (parsed.verb === 'back') {
      const previous = this.history.pop();
      if (!previous) return { invalid: true, message: 'There is no previous page to go back to.' };
      this.page = previous;
      return { message: 'Went back.' };
    }
    const els = this.elements();
    const el = els[parsed.index - 1];
    if (!el) return { invalid: true, message: `There is no element [${parsed.index}] on this page (elements are [1] to [${els.length}]).` };
    if (parsed.verb === 'type') {
      if (el.kind !== 'input') return { invalid: true, message: `[${parsed.index}] is a ${el.kind}, not an input: you can only type into inputs.` };
      if (this.page.kind === 'home') this.page = { ...this.page, search: parsed.text };
      else if (this.page.kind === 'checkout') this.page = { ...this.page, [el.field]: parsed.text };
      return { message: `Typed "${parsed.text}" into ${el.label}.` };
    }
    if (el.kind === 'input') return { invalid: true, message: `[${parsed.index}] is an input: use type [${parsed.index}] TEXT.` };
    return this.activate(el.effect);
  }

  private activate(effect: Effect): { message: string; invalid?: boolean; end?: 'success' | 'failure' } {
    const { site, task, page } = this;
    switch (effect.type) {
      case 'goto': {
        this.navigate(effect.page);
        if (task.difficulty === 1 && effect.page.kind === 'product' && effect.page.product === task.product) return { message: 'Task complete.', end: 'success' };
        return { message: '' };
      }
      case 'search': {
        if (page.kind !== 'home' || norm(page.search) === '') return { invalid: true, message: 'Type a query into the search input first.' };
        this.navigate({ kind: 'search', query: page.search });
        return { message: '' };
      }
      case 'colour':
      case 'size': {
        if (page.kind !== 'product') return { invalid: true, message: 'Nothing to choose here.' };
        this.page = { ...page, [effect.type]: effect.value };
        return { message: `Selected ${effect.type} ${effect.value}.` };
      }
      case 'add': {
        if (page.kind !== 'product') return { invalid: true, message: 'Nothing to add here.' };
        const product = site.products[page.product];
        if (product.stock === 0) return { invalid: true, message: `Sorry, the ${product.name} is out of stock.` };
        if (!page.colour || !page.size) return { invalid: true, message: `Choose a ${page.colour ? 'size' : 'colour'} first.` };
        const line = this.cart.find((l) => l.product === product.id && l.colour === page.colour && l.size === page.size);
        if (line) line.quantity++;
        else this.cart.push({ product: product.id, colour: page.colour, size: page.size, quantity: 1 });
        const message = `Added the ${product.name} (${page.colour}, ${page.size}) to the cart.`;
        if (task.difficulty === 2) {
          const ok = product.id === task.product && page.colour === task.colour;
          return { message: ok ? `${message} Task complete.` : `${message} That is not the requested item: task failed.`, end: ok ? 'success' : 'failure' };
        }
        return { message };
      }
      case 'remove': {
        const line = this.cart[effect.line];
        this.cart.splice(effect.line, 1);
        return { message: `Removed the ${site.products[line.product].name} from the cart.` };
      }
      case 'checkout': {
        if (this.cart.length === 0) return { invalid: true, message: 'Your cart is empty.' };
        this.navigate({ kind: 'checkout', name: '', address: '' });
        return { message: '' };
      }
      case 'place': {
        if (page.kind !== 'checkout') return { invalid: true, message: 'Nothing to place here.' };
        if (norm(page.name) === '' || norm(page.address) === '') return { invalid: true, message: 'Fill in the name and address fields first.' };
        const ok =
          task.difficulty === 3 &&
          this.cart.length > 0 &&
          this.cart.every((l) => l.product === task.product && l.size === task.size) &&
          norm(page.name) === norm(task.shipName!) &&
          norm(page.address) === norm(task.address!);
        this.navigate({ kind: 'confirmation', name: page.name, address: page.address });
        return { message: ok ? 'Task complete.' : 'This order does not match the task: task failed.', end: ok ? 'success' : 'failure' };
      }
    }
  }

  /** The numbered elements of the current page, in display order. */
  private elements(): Element[] {
    const { site, page } = this;
    const items = this.cart.reduce((n, l) => n + l.quantity, 0);
    const els: Element[] = [
      { kind: 'link', label: 'Home', effect: { type: 'goto', page: HOME } },
      { kind: 'link', label: `Cart (${items})`, effect: { type: 'goto', page: { kind: 'cart' } } },
    ];
    const productLink = (p: Product): Element => ({ kind: 'link', label: `${p.name} - $${p.price}`, effect: { type: 'goto', page: { kind: 'product', product: p.id, colour: null, size: null } } });
    switch (page.kind) {
      case 'home':
        site.categories.forEach((name, category) => els.push({ kind: 'link', label: name, effect: { type: 'goto', page: { kind: 'category', category } } }));
        els.push({ kind: 'input', label: 'search', field: 'search', value: page.search });
        els.push({ kind: 'button', label: 'Search', effect: { type: 'search' } });
        break;
      case 'category':
        for (const p of site.products) if (p.category === page.category) els.push(productLink(p));
        break;
      case 'search':
        for (const p of searchProducts(site, page.query)) els.push(productLink(p));
        break;
      case 'product': {
        const p = site.products[page.product];
        for (const c of p.colours) els.push({ kind: 'button', label: `Colour: ${c}${page.colour === c ? ' (selected)' : ''}`, effect: { type: 'colour', value: c } });
        for (const s of p.sizes) els.push({ kind: 'button', label: `Size: ${s}${page.size === s ? ' (selected)' : ''}`, effect: { type: 'size', value: s } });
        els.push({ kind: 'button', label: 'Add to cart', effect: { type: 'add' } });
        break;
      }
      case 'cart':
        this.cart.forEach((l, line) => els.push({ kind: 'button', label: `Remove ${site.products[l.product].name} (${l.colour}, ${l.size})`, effect: { type: 'remove', line } }));
        els.push({ kind: 'button', label: 'Checkout', effect: { type: 'checkout' } });
        break;
      case 'checkout':
        els.push({ kind: 'input', label: 'name', field: 'name', value: page.name });
        els.push({ kind: 'input', label: 'address', field: 'address', value: page.address });
        els.push({ kind: 'button', label: 'Place order', effect: { type: 'place' } });
        break;
      case 'confirmation':
        break;
    }
    return els;
  }

  private render(message: string): string {
    const { site, page } = this;
    const titles: Record<Page['kind'], string> = { home: 'Home', category: 'Category', search: 'Search results', product: 'Product', cart: 'Cart', checkout: 'Checkout', confirmation: 'Order confirmation' };
    let title = titles[page.kind];
    const lines: string[] = [`Task: ${this.task.text}`];
    if (message) lines.push(`Note: ${message}`);
    const body: string[] = [];
    if (page.kind === 'category') title = `Category: ${site.categories[page.category]}`;
    if (page.kind === 'search') {
      title = `Search results for "${page.query}"`;
      if (searchProducts(site, page.query).length === 0) body.push('No products match.');
    }
    if (page.kind === 'product') {
      const p = site.products[page.product];
      title = `Product: ${p.name}`;
      body.push(`${p.name} (${site.categories[p.category]}) - $${p.price} - ${p.stock > 0 ? `${p.stock} in stock` : 'out of stock'}`);
    }
    if (page.kind === 'confirmation') body.push(`Order #${this.orderNumber} placed, shipping to ${page.name} at ${page.address}. Items:`);
    if (page.kind === 'cart' || page.kind === 'confirmation') {
      const total = this.cart.reduce((sum, l) => sum + l.quantity * site.products[l.product].price, 0);
      if (this.cart.length === 0 && page.kind === 'cart') body.push('Your cart is empty.');
      for (const l of this.cart) body.push(`${l.quantity} x ${site.products[l.product].name} (${l.colour}, ${l.size}) - $${l.quantity * site.products[l.product].price}`);
      body.push(`Total: $${total}`);
    }
    lines.push(`--- ${site.shop} | ${title} ---`, ...body);
    this.elements().forEach((el, i) => {
      const value = el.kind === 'input' ? (el.value ? ` = "${el.value}"` : ' (empty)') : '';
      lines.push(`[${i + 1}] ${el.kind}: ${el.label}${value}`);
    });
    return lines.join('\n');
  }
}

const webShop: BuiltinEnvModule = {
  id: 'web-shop',
  description:
    'Web navigation on a small seeded shop site rendered as text: numbered links, inputs and buttons; act with click [N], type [N] TEXT and back to open a product, add it to the cart in the right colour, or buy it with the right size and shipping details.',
  maxEpisodeSteps: MAX_STEPS,
  make: () => new WebShopEnv(),
};

export default webShop;
