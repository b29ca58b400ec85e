// The built-in environments by id: what the app lists and what `--env <id>` will name.
import type { BuiltinEnvModule } from '../types.ts';
import codeGen from './code-gen.ts';
import reasoning from './reasoning.ts';
import supportDesk from './support-desk.ts';
import toolUse from './tool-use.ts';
import webShop from './web-shop.ts';

export const BUILTIN_ENVIRONMENTS: ReadonlyMap<string, BuiltinEnvModule> = new Map(
  [supportDesk, toolUse, webShop, reasoning, codeGen].map((module) => [module.id, module]),
);
