// WGSL sources are imported as text: Vite and Vitest handle `?raw` natively; under plain Node
// the loader in bin/raw-loader.js does the same.
declare module '*.wgsl?raw' {
  const source: string;
  export default source;
}
