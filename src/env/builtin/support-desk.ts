// support-desk: a customer-support conversation under written business rules, with a simulated
// customer and a seeded orders database.
//
// The agent reads the rules, the customer's opening message and the action format, then works the
// case with tool-like commands (ask, lookup, refund, status, change_address, decline, escalate,
// reply). The case ends at the first resolution (refund, status, change_address, decline, escalate):
// +1 if it is the rule-correct one, -1 if it breaks a rule (refunding an ineligible order, sharing or
// changing an order before the customer is verified, changing a shipped order's address, ignoring a
// request for a manager), 0 if it is merely the wrong outcome; every step costs 0.01.
//
// Difficulty 1: one request, every detail given up front. 2: the customer leaves out details (order
// number, email, new address) that must be asked for. 3: cases where the rules say no (decline),
// cases for a human (escalate), an email that does not match the order, a second order mentioned as
// a distractor, and customers who dodge the first question.
//
// Instances are numbered: train instances even, test instances odd, so the splits never overlap;
// the instance number and the difficulty determine the case (info.instance identifies both).
// Pure TypeScript, no Node-only APIs.
import type { BuiltinEnvModule, Env, EnvInfo, ExpertEnv, ResetOptions, ResetResult, Split, StepResult } from '../types.ts';
import { parseCommand } from '../text-actions.ts';
import { mulberry32 } from '../../common/random.ts';

const MAX_STEPS = 10;
const STEP_COST = 0.01;
const REFUND_WINDOW_DAYS = 30;
const DAY_MS = 86_400_000;

// ---------------------------------------------------------------------------------------------
// Seeded randomness


/** A 32-bit integer hash (splitmix-style finaliser) of any number of integers. */
function hash32(...values: number[]): number {
  let h = 0x9e3779b9;
  for (const v of values) {
    h = Math.imul(h ^ (v >>> 0), 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
  }
  return h >>> 0;
}

type Rng = () => number;
const pick = <T>(rng: Rng, items: readonly T[]): T => items[Math.floor(rng() * items.length)];
const int = (rng: Rng, lo: number, hi: number): number => lo + Math.floor(rng() * (hi - lo + 1));

// ---------------------------------------------------------------------------------------------
// Cases

type Intent = 'refund' | 'status' | 'address' | 'other';
type OrderStatus = 'processing' | 'shipped' | 'delivered';

interface Order {
  id: string;
  email: string;
  item: string;
  orderedDaysAgo: number;
  status: OrderStatus;
  /** Days since it shipped / was delivered (when it has). */
  shippedDaysAgo?: number;
  deliveredDaysAgo?: number;
  opened: boolean;
  damaged: boolean;
  address: string;
}

/** Everything that defines one instance (hidden from the agent, apart from what the customer says). */
interface Case {
  /** Case family, for diagnostics: e.g. 'refund', 'refund-late', 'manager', 'email-mismatch'. */
  kind: string;
  intent: Intent;
  today: number; // ms since the epoch, UTC midnight
  orders: Order[];
  targetId: string;
  /** The email the customer gives (differs from the record in 'email-mismatch' cases). */
  claimedEmail: string;
  newAddress?: string;
  /** Details stated in the opening message. */
  given: { orderId: boolean; email: boolean; address: boolean };
  /** Another order of the customer's, mentioned in the opening (acting on it is a violation). */
  distractorId?: string;
  /** The customer dodges the first question. */
  reluctant: boolean;
  /** The customer demands a manager in the opening message / at the first question. */
  managerUpFront: boolean;
  managerLater: boolean;
  /** The request is not covered by the rules (price adjustment, compensation, exchange). */
  outOfScope: boolean;
  opening: string;
}

const ITEMS = ['wireless headphones', 'espresso machine', 'hiking backpack', 'desk lamp', 'yoga mat', 'bluetooth speaker', 'cast-iron skillet', 'electric kettle', 'pair of running shoes', 'board game', 'winter jacket', 'blender'];
const FIRST = ['maya', 'liam', 'noor', 'diego', 'hana', 'oscar', 'priya', 'tom', 'lena', 'kofi', 'ines', 'sam'];
const LAST = ['chen', 'okafor', 'silva', 'novak', 'tanaka', 'berg', 'haddad', 'murphy', 'rossi', 'khan'];
const DOMAINS = ['example.com', 'mail.example', 'inbox.example'];
const STREETS = ['Elm Street', 'Harbor Road', 'Maple Avenue', 'Station Lane', 'Mill Close', 'Cedar Drive', 'Quarry Way'];
const CITIES = ['Springfield', 'Riverton', 'Lakeside', 'Fairview', 'Brookhaven', 'Oakdale'];
const OUT_OF_SCOPE = [
  'it went on sale two days after I bought it, and I want the price difference back',
  'it arrived a week late and I would like some compensation for the delay',
  'I would like to swap it for a different colour instead',
];

function makeAddress(rng: Rng): string {
  return `${int(rng, 2, 199)} ${pick(rng, STREETS)}, ${pick(rng, CITIES)}`;
}

function makeOrder(rng: Rng, id: string, email: string, item: string, status: OrderStatus): Order {
  const order: Order = { id, email, item, orderedDaysAgo: 0, status, opened: false, damaged: false, address: makeAddress(rng) };
  if (status === 'processing') order.orderedDaysAgo = int(rng, 0, 2);
  if (status === 'shipped') {
    order.shippedDaysAgo = int(rng, 1, 4);
    order.orderedDaysAgo = order.shippedDaysAgo + int(rng, 1, 3);
  }
  if (status === 'delivered') {
    order.deliveredDaysAgo = int(rng, 1, 60);
    order.shippedDaysAgo = order.deliveredDaysAgo + int(rng, 1, 4);
    order.orderedDaysAgo = order.shippedDaysAgo + int(rng, 1, 3);
    order.opened = rng() < 0.5;
    order.damaged = rng() < 0.3;
  }
  return order;
}

/** Whether the refund rule allows a refund of this order. */
function refundable(order: Order): boolean {
  return order.status === 'delivered' && (order.deliveredDaysAgo ?? Infinity) <= REFUND_WINDOW_DAYS && (!order.opened || order.damaged);
}

function generateCase(instance: number, difficulty: number): Case {
  const rng = mulberry32(hash32(instance, difficulty, 0x5d35));
  const today = Date.UTC(2025, 0, 1) + int(rng, 0, 364) * DAY_MS;
  const first = pick(rng, FIRST);
  const last = pick(rng, LAST);
  const email = `${first}.${last}${rng() < 0.4 ? int(rng, 1, 99) : ''}@${pick(rng, DOMAINS)}`;
  const ids = new Set<string>();
  const newId = (): string => {
    let id: string;
    do id = `ORD-${int(rng, 10000, 99999)}`;
    while (ids.has(id));
    ids.add(id);
    return id;
  };
  const item = pick(rng, ITEMS);

  const kind =
    difficulty >= 3
      ? pick(rng, ['refund', 'status', 'address', 'refund-late', 'refund-opened', 'address-shipped', 'email-mismatch', 'manager', 'manager-later', 'out-of-scope'] as const)
      : pick(rng, ['refund', 'status', 'address'] as const);
  let intent: Intent = kind.startsWith('refund') ? 'refund' : kind.startsWith('address') ? 'address' : kind === 'status' ? 'status' : 'other';
  if (kind === 'email-mismatch' || kind === 'manager' || kind === 'manager-later') intent = pick(rng, ['refund', 'status', 'address'] as const);

  // The customer's order, shaped so the case is what its kind says.
  const status: OrderStatus =
    intent === 'refund' || kind === 'out-of-scope' ? 'delivered' : intent === 'address' ? (kind === 'address-shipped' ? pick(rng, ['shipped', 'delivered'] as const) : 'processing') : pick(rng, ['processing', 'shipped', 'delivered'] as const);
  const target = makeOrder(rng, newId(), email, item, status);
  if (intent === 'refund') {
    if (kind === 'refund-late') target.deliveredDaysAgo = int(rng, REFUND_WINDOW_DAYS + 1, 75);
    else target.deliveredDaysAgo = difficulty >= 3 && rng() < 0.25 ? REFUND_WINDOW_DAYS : int(rng, 1, REFUND_WINDOW_DAYS - 1);
    if (kind === 'refund-opened') [target.opened, target.damaged] = [true, false];
    else if (rng() < 0.5) [target.opened, target.damaged] = [false, rng() < 0.3];
    else [target.opened, target.damaged] = [rng() < 0.5, true];
    target.shippedDaysAgo = target.deliveredDaysAgo + int(rng, 1, 4);
    target.orderedDaysAgo = target.shippedDaysAgo + int(rng, 1, 3);
  }
  const orders: Order[] = [target];
  // A second order of the same customer (a distractor at difficulty 3) and another customer's order.
  const other = makeOrder(rng, newId(), email, pick(rng, ITEMS.filter((i) => i !== item)), 'delivered');
  other.deliveredDaysAgo = int(rng, 40, 120);
  orders.push(other);
  orders.push(makeOrder(rng, newId(), `${pick(rng, FIRST)}.${pick(rng, LAST)}@${pick(rng, DOMAINS)}`, pick(rng, ITEMS), pick(rng, ['processing', 'shipped', 'delivered'] as const)));

  const claimedEmail = kind === 'email-mismatch' ? email.replace(/@.*/, '') + `@${pick(rng, ['othermail.example', 'webmail.example'])}` : email;
  const newAddress = intent === 'address' ? makeAddress(rng) : undefined;

  // What the opening leaves out.
  const given = { orderId: true, email: true, address: true };
  const managerLater = kind === 'manager-later';
  if (difficulty === 2 || (difficulty >= 3 && (managerLater || rng() < 0.5))) {
    const r = rng();
    given.orderId = r >= 1 / 3;
    given.email = r < 1 / 3 || r >= 2 / 3;
    if (intent === 'address' && rng() < 0.5) given.address = false;
  }
  const hasMissing = !given.orderId || !given.email || !given.address;
  const reluctant = difficulty >= 3 && hasMissing && !managerLater && rng() < 0.4;
  const distractorId = difficulty >= 3 && rng() < 0.5 ? other.id : undefined;

  const c: Case = {
    kind,
    intent,
    today,
    orders,
    targetId: target.id,
    claimedEmail,
    newAddress,
    given,
    distractorId,
    reluctant,
    managerUpFront: kind === 'manager',
    managerLater,
    outOfScope: kind === 'out-of-scope',
    opening: '',
  };
  c.opening = openingMessage(c, target, rng);
  return c;
}

function openingMessage(c: Case, order: Order, rng: Rng): string {
  const fromOrder = c.given.orderId ? ` from order ${order.id}` : '';
  const email = c.given.email ? ` My email is ${c.claimedEmail}.` : '';
  let text: string;
  if (c.outOfScope) {
    text = `Hi, about the ${order.item}${fromOrder}: ${pick(rng, OUT_OF_SCOPE)}.${email}`;
  } else if (c.intent === 'refund') {
    const why = order.damaged ? 'it arrived damaged' : order.opened ? "I've used it a couple of times and I don't like it" : 'I never opened it, I just changed my mind';
    text = `Hi, I'd like a refund for the ${order.item}${fromOrder} - ${why}.${email}`;
  } else if (c.intent === 'status') {
    text = `Hi, can you tell me what's happening with the ${order.item}${fromOrder ? ` (order ${order.id})` : ' I ordered'}?${email}`;
  } else {
    const to = c.given.address ? ` to ${c.newAddress}` : '';
    text = `Hi, I need to change the delivery address for the ${order.item}${fromOrder}${to}.${email}`;
  }
  if (c.distractorId) text += ` (My other order ${c.distractorId} was fine, this is about the ${order.item}.)`;
  if (c.managerUpFront) text += ' And I want to speak to a manager, right now.';
  return text;
}

// ---------------------------------------------------------------------------------------------
// Text

const RULES = `You are a support agent at Northwind Goods. Follow these business rules exactly:
1. Verification: before you refund, share the status of, or change an order, the customer must have given you its order number and an email address, and that email must match the email on file (use lookup). If the email does not match, decline.
2. Refunds only for delivered orders, within ${REFUND_WINDOW_DAYS} days of delivery, and only if the item is unopened or arrived damaged. Otherwise decline.
3. An address can be changed only before the order ships (status "processing"). Otherwise decline.
4. Escalate to a human when the customer asks for a manager, or asks for something these rules do not cover (e.g. price adjustments, compensation, exchanges).
5. Act only on the order the customer asks about, and look it up before acting on it.`;

const FORMAT = `Actions (one per turn):
  ask: <question for the customer: order number, email, new address>
  lookup: <order id>                         (internal; the customer does not see it)
  refund: <order id>
  status: <order id>                         (tells the customer the order status)
  change_address: <order id> | <new address>
  decline: <reason>
  escalate
  reply: <message to the customer>
Refund, status, change_address, decline and escalate close the case.`;

function isoDate(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

function describeStatus(order: Order, today: number): string {
  const when = (days: number) => `${isoDate(today - days * DAY_MS)} (${days} day${days === 1 ? '' : 's'} ago)`;
  if (order.status === 'processing') return 'processing (not shipped yet)';
  if (order.status === 'shipped') return `shipped on ${when(order.shippedDaysAgo!)}, in transit`;
  return `delivered on ${when(order.deliveredDaysAgo!)}`;
}

function describeOrder(order: Order, today: number): string {
  return (
    `Order ${order.id}: item: ${order.item}; email on file: ${order.email}; ordered ${isoDate(today - order.orderedDaysAgo * DAY_MS)}; ` +
    `status: ${describeStatus(order, today)}; opened: ${order.opened ? 'yes' : 'no'}; damaged: ${order.damaged ? 'yes' : 'no'}; shipping address: ${order.address}.`
  );
}

// ---------------------------------------------------------------------------------------------
// Parsing

const VERBS: Record<string, string[]> = {
  ask: ['ask'],
  lookup: ['lookup', 'look up', 'look-up'],
  refund: ['refund', 'issue refund'],
  status: ['status', 'share status', 'order status'],
  change_address: ['change_address', 'change address', 'change-address', 'update_address', 'update address'],
  decline: ['decline', 'deny'],
  escalate: ['escalate'],
  reply: ['reply', 'say', 'message'],
};

/** `ORD-12345`, `ord 12345`, `#12345` or a bare five-digit number, normalised to `ORD-12345`. */
function parseOrderId(text: string): string | null {
  const match = /\bord[\s#:_-]*(\d{5})\b/i.exec(text) ?? /(?:^|[^\d])(\d{5})(?!\d)/.exec(text);
  return match ? `ORD-${match[1]}` : null;
}

type Field = 'orderId' | 'email' | 'address';

/** Which details a question asks for. "email address" is the email, not a shipping address. */
function askedFields(question: string): Field[] {
  const q = question.toLowerCase();
  const fields: Field[] = [];
  if (/order\s*(?:number|no\b|#|id\b|_id)|order_id|\bnumber\b|\bid\b/.test(q)) fields.push('orderId');
  if (/e-?mail/.test(q)) fields.push('email');
  if (/(?<!e-?mail\s)\baddress/.test(q.replace(/e-?mail\s+address(es)?/g, 'email'))) fields.push('address');
  return fields;
}

const normalizeAddress = (s: string): string => s.toLowerCase().replace(/[^a-z0-9]+/g, ' ').trim();

// ---------------------------------------------------------------------------------------------
// The environment

type Outcome = 'correct' | 'violation' | 'wrong';

class SupportDesk implements Env, ExpertEnv {
  private case!: Case;
  private instance!: { difficulty: number; id: number };
  private told = { orderId: false, email: false, address: false };
  private mentioned: string[] = [];
  private lookedUp = new Set<string>();
  private reluctanceUsed = false;
  private managerRequested = false;
  private steps = 0;
  private done = true;
  private success = false;

  reset({ seed, options }: { seed: number; options?: ResetOptions }): ResetResult {
    const split: Split = options?.split === 'test' ? 'test' : 'train';
    const d = Math.round(Number(options?.difficulty ?? 1));
    const difficulty = Number.isFinite(d) ? Math.min(3, Math.max(1, d)) : 1;
    // Train instances are even, test instances odd: the splits can never share one.
    const id = 2 * (hash32(Math.floor(Number(seed) || 0), 0x51ed) % 1_000_000) + (split === 'test' ? 1 : 0);
    this.instance = { difficulty, id };
    this.case = generateCase(id, difficulty);
    this.told = { ...this.case.given };
    this.mentioned = [];
    if (this.case.given.orderId) this.mentioned.push(this.case.targetId);
    if (this.case.distractorId) this.mentioned.push(this.case.distractorId);
    this.lookedUp = new Set();
    this.reluctanceUsed = false;
    this.managerRequested = this.case.managerUpFront;
    this.steps = 0;
    this.done = false;
    this.success = false;
    const observation = `${RULES}\nToday is ${isoDate(this.case.today)}.\n\n${FORMAT}\n\nCustomer: "${this.case.opening}"`;
    // The case's kind (e.g. 'refund-late', 'manager-later') says how it must end: info has it only once it has.
    return { observation, info: { instance: this.instance, split, difficulty } };
  }

  step(action: string): StepResult {
    if (this.done) return { observation: 'The case is closed.', reward: 0, terminated: true, truncated: false, info: this.info({ success: this.success }) };
    this.steps++;
    const { observation, outcome } = this.act(String(action ?? ''));
    let reward = -STEP_COST;
    let terminated = false;
    if (outcome) {
      terminated = true;
      this.done = true;
      this.success = outcome === 'correct';
      reward += outcome === 'correct' ? 1 : outcome === 'violation' ? -1 : 0;
    }
    const truncated = !terminated && this.steps >= MAX_STEPS;
    if (truncated) this.done = true;
    const info = this.info(terminated || truncated ? { success: this.success, outcome: outcome ?? 'truncated', kind: this.case.kind } : {});
    return { observation, reward, terminated, truncated, info };
  }

  /**
   * Every action the conversation so far allows, built from what the agent has seen (what the
   * customer said, which orders it looked up), never from the case: so the list holds the expert's
   * action without singling it out (every refusal reason once an order is looked up, not only the
   * right one), and it is sorted, so its order says nothing either.
   */
  validActions(): string[] {
    if (this.done) return [];
    const c = this.case;
    const actions = new Set<string>();
    const id = this.told.orderId ? c.targetId : this.mentioned[0];
    if (id) {
      actions.add(`refund: ${id}`);
      actions.add(`status: ${id}`);
      if (this.told.address && c.newAddress) actions.add(`change_address: ${id} | ${c.newAddress}`);
    }
    actions.add('decline: this request is not covered by our policy');
    if (this.lookedUp.size > 0) for (const reason of DECLINE_REASONS) actions.add(`decline: ${reason}`);
    actions.add('escalate');
    for (const m of this.mentioned) actions.add(`lookup: ${m}`);
    const ask = this.askForMissing();
    if (ask) actions.add(ask);
    if (!this.told.orderId || !this.told.email) actions.add('ask: Could you give me your order number and email?');
    actions.add('ask: What is the new shipping address?');
    actions.add('reply: I am looking into this for you.');
    return [...actions].sort();
  }

  expertAction(): string {
    const c = this.case;
    if (this.done) return 'reply: Thank you for contacting Northwind Goods.';
    if (this.managerRequested) return 'escalate';
    if (c.outOfScope) return 'escalate';
    const ask = this.askForMissing();
    if (ask) return ask;
    if (!this.lookedUp.has(c.targetId)) return `lookup: ${c.targetId}`;
    const order = this.order(c.targetId)!;
    if (c.claimedEmail !== order.email) return `decline: ${EMAIL_MISMATCH}`;
    if (c.intent === 'refund') return refundable(order) ? `refund: ${order.id}` : `decline: ${refundRefusal(order)}`;
    if (c.intent === 'status') return `status: ${order.id}`;
    return order.status === 'processing' ? `change_address: ${order.id} | ${c.newAddress}` : `decline: ${ALREADY_SHIPPED}`;
  }

  hiddenState(): Case {
    return this.case;
  }

  // -- internals ------------------------------------------------------------------------------

  /** The question for the details still missing (an address only for an address change, which the opening says), or null. */
  private askForMissing(): string | null {
    const missing: string[] = [];
    if (!this.told.orderId) missing.push('order number');
    if (!this.told.email) missing.push('email');
    if (this.case.intent === 'address' && !this.told.address) missing.push('new shipping address');
    if (missing.length === 0) return null;
    return `ask: Could you give me your ${missing.length > 1 ? `${missing.slice(0, -1).join(', ')} and ${missing.at(-1)}` : missing[0]}?`;
  }

  private info(extra: EnvInfo): EnvInfo {
    return { instance: this.instance, step: this.steps, ...extra };
  }

  private order(id: string): Order | undefined {
    return this.case.orders.find((o) => o.id === id);
  }

  private act(action: string): { observation: string; outcome?: Outcome } {
    const command = parseCommand(action, VERBS);
    if (!command) return { observation: `System: unrecognised action. ${FORMAT}` };
    const arg = command.argument;
    switch (command.verb) {
      case 'ask':
        return { observation: `Customer: "${this.answer(askedFields(arg))}"` };
      case 'reply': {
        // A question in a reply that asks for details is treated as an ask.
        const fields = askedFields(arg);
        if (arg.includes('?') && fields.length) return { observation: `Customer: "${this.answer(fields)}"` };
        return { observation: `Customer: "${this.chat()}"` };
      }
      case 'lookup': {
        const id = parseOrderId(arg);
        const order = id ? this.order(id) : undefined;
        if (!order) return { observation: `System: no order ${id ?? `"${arg.slice(0, 40)}"`} found. Order ids look like ORD-12345.` };
        this.lookedUp.add(order.id);
        return { observation: `System: ${describeOrder(order, this.case.today)}` };
      }
      case 'refund':
      case 'status':
      case 'change_address':
        return this.resolveOnOrder(command.verb, arg);
      case 'decline':
        return this.finish(this.managerRequested ? 'violation' : this.expectedResolution() === 'decline' ? 'correct' : 'wrong', 'declined');
      case 'escalate':
        return this.finish(this.managerRequested || this.case.outOfScope ? 'correct' : 'wrong', 'escalated');
    }
    return { observation: `System: unrecognised action. ${FORMAT}` };
  }

  /** The resolution the rules call for, given what the customer has said so far. */
  private expectedResolution(): 'refund' | 'status' | 'change_address' | 'decline' | 'escalate' {
    const c = this.case;
    if (this.managerRequested || c.outOfScope) return 'escalate';
    const order = this.order(c.targetId)!;
    if (c.claimedEmail !== order.email) return 'decline';
    if (c.intent === 'refund') return refundable(order) ? 'refund' : 'decline';
    if (c.intent === 'status') return 'status';
    return order.status === 'processing' ? 'change_address' : 'decline';
  }

  private resolveOnOrder(verb: 'refund' | 'status' | 'change_address', arg: string): { observation: string; outcome?: Outcome } {
    const c = this.case;
    const [idPart, ...rest] = arg.split('|');
    const id = parseOrderId(idPart) ?? parseOrderId(arg);
    const order = id ? this.order(id) : undefined;
    if (!order) return { observation: `System: no order ${id ?? `"${arg.slice(0, 40)}"`} found. Order ids look like ORD-12345.` };
    if (this.managerRequested) return this.finish('violation', `${verb} on ${order.id}`, 'rule 4: the customer asked for a manager');
    const verified = order.id === c.targetId && this.told.orderId && this.told.email && c.claimedEmail === order.email;
    if (!verified) {
      const why = order.id !== c.targetId ? 'rule 5: that is not the order the customer asked about' : 'rule 1: the customer is not verified for this order';
      return this.finish('violation', `${verb} on ${order.id}`, why);
    }
    if (!this.lookedUp.has(order.id)) return { observation: `System: look up ${order.id} before acting on it (rule 5). Nothing was done.` };
    if (verb === 'refund') {
      if (!refundable(order)) return this.finish('violation', `refunded ${order.id}`, `rule 2: ${refundRefusal(order)}`);
      return this.finish(c.intent === 'refund' && !c.outOfScope ? 'correct' : 'wrong', `refunded ${order.id}`);
    }
    if (verb === 'status') return this.finish(c.intent === 'status' ? 'correct' : 'wrong', `shared the status of ${order.id}: ${describeStatus(order, c.today)}`);
    if (order.status !== 'processing') return this.finish('violation', `changed the address of ${order.id}`, 'rule 3: the order has already shipped');
    // Prefer the text after '|'; without one, whatever follows the order id.
    const address = rest.length ? rest.join('|') : arg.replace(/\bord[\s#:_-]*\d{5}\b|\b\d{5}\b/i, '').replace(/^\s*(?:to\b|->|:|,)\s*/i, '');
    const right = c.intent === 'address' && this.told.address && normalizeAddress(address) === normalizeAddress(c.newAddress ?? '');
    return this.finish(right ? 'correct' : 'wrong', `changed the address of ${order.id} to "${address.trim().slice(0, 80)}"`);
  }

  private finish(outcome: Outcome, what: string, rule?: string): { observation: string; outcome: Outcome } {
    const reaction =
      outcome === 'correct'
        ? what === 'declined'
          ? 'Oh well, I understand. Thanks for explaining.'
          : what === 'escalated'
            ? "Thanks, I'll wait to hear from them."
            : 'Thank you, that is all I needed!'
        : outcome === 'violation'
          ? 'Hm, okay.'
          : "That's not what I asked for.";
    const verdict =
      outcome === 'correct' ? 'Case resolved correctly.' : outcome === 'violation' ? `Supervisor: that broke ${rule}. The case is closed.` : `The case is closed without the right resolution (the rules called for: ${this.expectedResolution()}).`;
    return { observation: `System: ${what}.\nCustomer: "${reaction}"\n${verdict}`, outcome };
  }

  /** The simulated customer's answer to a question about the given details. */
  private answer(fields: Field[]): string {
    const c = this.case;
    if (this.managerRequested) return "I'm done with this. Get me a manager.";
    if (!fields.length) return 'Sorry, what do you need from me?';
    if (c.reluctant && !this.reluctanceUsed) {
      this.reluctanceUsed = true;
      return c.intent === 'status' ? 'Why do you need that? Do you also sell gift cards, by the way?' : 'Why do you need all that? I just want this sorted out.';
    }
    if (c.managerLater) {
      this.managerRequested = true;
      return 'Ugh, this is taking far too long. I want to talk to a manager.';
    }
    const parts: string[] = [];
    if (fields.includes('orderId')) {
      this.told.orderId = true;
      if (!this.mentioned.includes(c.targetId)) this.mentioned.unshift(c.targetId);
      parts.push(`It's order ${c.targetId}.`);
    }
    if (fields.includes('email')) {
      this.told.email = true;
      parts.push(`My email is ${c.claimedEmail}.`);
    }
    if (fields.includes('address')) {
      if (c.intent === 'address') {
        this.told.address = true;
        parts.push(`The new address is ${c.newAddress}.`);
      } else parts.push("Why would you need an address? That's not what I asked about.");
    }
    return parts.join(' ');
  }

  /** The customer's reaction to a plain reply. */
  private chat(): string {
    if (this.managerRequested) return "I'm not talking to a bot any more. Get me a manager.";
    const c = this.case;
    const want = c.outOfScope ? 'what I asked for' : c.intent === 'refund' ? 'my refund' : c.intent === 'status' ? 'where my order is' : 'the address change';
    return `Okay... so can you help me with ${want}?`;
  }
}

const EMAIL_MISMATCH = 'the email you gave does not match the order, so I cannot verify your identity';
const ALREADY_SHIPPED = 'the order has already shipped, so its address can no longer be changed';
const NOT_DELIVERED = 'the order has not been delivered yet';
const DELIVERED_TOO_LONG_AGO = `the item was delivered more than ${REFUND_WINDOW_DAYS} days ago`;
const OPENED = 'the item has been opened and was not damaged';
/** Every reason the rules give for declining: the valid actions offer them all, so that none marks the case out. */
const DECLINE_REASONS = [EMAIL_MISMATCH, ALREADY_SHIPPED, NOT_DELIVERED, DELIVERED_TOO_LONG_AGO, OPENED];

function refundRefusal(order: Order): string {
  if (order.status !== 'delivered') return NOT_DELIVERED;
  if ((order.deliveredDaysAgo ?? 0) > REFUND_WINDOW_DAYS) return DELIVERED_TOO_LONG_AGO;
  return OPENED;
}

const supportDesk: BuiltinEnvModule = {
  id: 'support-desk',
  description:
    'Customer support under written business rules: verify the customer, look up orders, then refund, share status, change an address, decline or escalate, as the rules require; a simulated customer answers questions.',
  maxEpisodeSteps: MAX_STEPS,
  make: () => new SupportDesk(),
};

export default supportDesk;
