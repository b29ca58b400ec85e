// copy-number.js: a probe of one skill, copying a number from the context. It is the last step of a
// tool-use episode alone: the question, the tool's reply with the number, and three answers to
// choose from (the number, a near miss, another number in range). Nothing else is asked, so a policy
// that cannot copy stays at chance (a third) however long it trains.
//
//   npm run bench:learn -- --envs bench/envs/copy-number.js --algos reinforce,bc --episodes 2000
//
// docs/training.md quotes what stories260K and the default model make of it.
const NAMES = ['Dorin', 'Pima', 'Sulel', 'Korus', 'Zanira', 'Mopa', 'Trilo', 'Bexin'];

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Train instances have an even name-and-number code, test instances an odd one: the splits never overlap.
const splitClass = (name, answer) => (NAMES.indexOf(name) * 97 + answer) & 1;

export default {
  id: 'copy-number',
  description: 'Answer with the number the tool returned.',
  maxEpisodeSteps: 1,
  make() {
    let answer = 0;
    let candidates = [];
    return {
      reset({ seed, options = {} }) {
        const random = mulberry32(seed);
        const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
        const want = options.split === 'test' ? 1 : 0;
        let name;
        do {
          name = NAMES[int(0, NAMES.length - 1)];
          answer = int(8, 90);
        } while (splitClass(name, answer) !== want);
        const near = answer + (random() < 0.5 ? -1 : 1) * int(1, 5);
        let other;
        do other = int(8, 90);
        while (other === answer || other === near);
        candidates = [answer, near, other].map((n) => `answer: ${n}`).sort();
        return {
          observation: `Question: How old is ${name}?\nlookup ${name.toLowerCase()} → ${answer} (age of ${name}, in years)`,
          info: { instance: { name, answer } },
        };
      },
      validActions() {
        return candidates;
      },
      expertAction() {
        return `answer: ${answer}`;
      },
      step(action) {
        const success = String(action).trim() === `answer: ${answer}`;
        return { observation: success ? 'Correct.' : `Wrong: it was ${answer}.`, reward: success ? 1 : 0, terminated: true, truncated: false, info: { success } };
      },
    };
  },
};
