// The editor's starting point: a complete, small environment that shows every part of the contract
// (docs/environments.md): seeded instances, reset/step/validActions, per-step reward, info.success,
// a scripted expert.
export const ENV_TEMPLATE = `// A custom environment: pick the largest number. Edit it, press Validate, then train on it.
// The contract (docs/environments.md): reset({ seed, options }) -> { observation, info };
// step(action) -> { observation, reward, terminated, truncated, info }; validActions() -> string[];
// expertAction() -> the action a scripted expert takes (optional; behaviour cloning imitates it).
// Draw all randomness from the seed, never from Math.random(), so that episodes replay exactly.

function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export default {
  id: 'largest-number',
  description: 'Pick the largest of four numbers.',
  maxEpisodeSteps: 2,
  make() {
    let numbers = [];
    return {
      reset({ seed }) {
        const random = mulberry32(seed);
        numbers = Array.from({ length: 4 }, () => Math.floor(random() * 90) + 10);
        return { observation: 'Numbers: ' + numbers.join(', ') + '. Which is the largest?', info: {} };
      },
      validActions() {
        return numbers.map((n) => 'pick ' + n);
      },
      expertAction() {
        return 'pick ' + Math.max(...numbers);
      },
      step(action) {
        const picked = Number(String(action).replace(/[^0-9]/g, ''));
        if (!numbers.includes(picked)) {
          return { observation: 'Pick one of: ' + numbers.join(', '), reward: -0.1, terminated: false, truncated: false, info: {} };
        }
        const success = picked === Math.max(...numbers);
        return { observation: success ? 'Correct.' : 'Wrong.', reward: success ? 1 : 0, terminated: true, truncated: false, info: { success } };
      },
    };
  },
};
`;
