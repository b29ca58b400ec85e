// Lets plain Node run the TypeScript sources: tsx for TypeScript, raw-loader for `?raw` shader imports.
import { register } from 'node:module';
import { register as registerTsx } from 'tsx/esm/api';

registerTsx();
register('./raw-loader.js', import.meta.url);
