import { describe, expect, test } from 'vitest';
import { BUILTIN_ENVIRONMENTS } from '../../src/env/builtin/index.ts';

describe('built-in environment registry', () => {
  test('lists each built-in under its own id', () => {
    expect([...BUILTIN_ENVIRONMENTS.keys()].sort()).toEqual(['code-gen', 'reasoning', 'support-desk', 'tool-use', 'web-shop']);
    for (const [id, module] of BUILTIN_ENVIRONMENTS) expect(module.id).toBe(id);
  });
});
