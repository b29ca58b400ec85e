// comlink ships its Node adapter as an .mjs file whose types sit in a .d.ts beside it, which
// TypeScript does not look for; this points the import at them.
declare module 'comlink/dist/esm/node-adapter.mjs' {
  export { default } from 'comlink/dist/esm/node-adapter';
}
