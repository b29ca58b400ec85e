// The page's model locations (engine/model/source-browser.ts): a picked folder's files read as a
// model folder, Hub ids and URLs routed to their sources, and clear errors for an empty pick or a
// folder the page no longer holds.
import { describe, expect, it } from 'vitest';
import { HubModelSource } from '../../src/engine/model/hub.ts';
import { BlobModelSource, openBrowserModelSource, pickedFolder } from '../../src/engine/model/source-browser.ts';
import { HttpModelSource } from '../../src/engine/model/source.ts';

/** What `<input type="file" webkitdirectory>` gives: Files whose webkitRelativePath starts with the folder's name. */
function picked(name: string, files: Record<string, string | Uint8Array>): File[] {
  return Object.entries(files).map(([path, body]) => {
    const file = new File([body as BlobPart], path.split('/').at(-1)!);
    Object.defineProperty(file, 'webkitRelativePath', { value: `${name}/${path}` });
    return file;
  });
}

describe('picked folders', () => {
  it('reads files by their path inside the folder, nested ones included, with progress', async () => {
    const weights = Uint8Array.from({ length: 1000 }, (_, i) => i % 251);
    const folder = pickedFolder(picked('my-model', { 'config.json': '{"model_type":"llama"}', 'model.safetensors': weights, 'onnx/model.onnx': 'onnx' }));
    expect(folder.name).toBe('my-model');
    expect([...folder.files.keys()].sort()).toEqual(['config.json', 'model.safetensors', 'onnx/model.onnx']);

    const source = new BlobModelSource(folder);
    expect(source.location).toBe('folder:my-model/');
    expect(await source.exists('config.json')).toBe(true);
    expect(await source.exists('tokenizer.json')).toBe(false);
    expect(await source.readText('onnx/model.onnx')).toBe('onnx');
    const progress: [number, number | null][] = [];
    expect(await source.readBytes('model.safetensors', (loaded, total) => progress.push([loaded, total]))).toEqual(weights);
    expect(progress.at(-1)).toEqual([1000, 1000]);
    await expect(source.readText('tokenizer.json')).rejects.toThrow('the picked folder "my-model" has no tokenizer.json');
  });

  it('refuses an empty pick, and names a folder picked in an earlier visit', () => {
    expect(() => pickedFolder([])).toThrow('the picked folder is empty: pick the folder that holds config.json');
    expect(() => openBrowserModelSource('folder:my-model')).toThrow('the folder "my-model" was picked in an earlier visit and the browser no longer holds its files: pick it again');
    const folder = pickedFolder(picked('my-model', { 'config.json': '{}' }));
    expect(openBrowserModelSource('folder:my-model', { folders: new Map([['my-model', folder]]) })).toBeInstanceOf(BlobModelSource);
  });
});

describe('openBrowserModelSource', () => {
  it('opens Hub ids on the Hub or the given mirror, and anything else as a folder URL', () => {
    const hub = openBrowserModelSource('hf:HuggingFaceTB/SmolLM2-135M-Instruct@v1', { hub: { endpoint: 'http://127.0.0.1:9/' } });
    expect(hub).toBeInstanceOf(HubModelSource);
    expect((hub as HubModelSource).endpoint).toBe('http://127.0.0.1:9');
    expect((hub as HubModelSource).id).toEqual({ owner: 'HuggingFaceTB', repo: 'SmolLM2-135M-Instruct', revision: 'v1' });
    expect((openBrowserModelSource('hf:a/b') as HubModelSource).endpoint).toBe('https://huggingface.co');
    expect(openBrowserModelSource('http://localhost:5173/models/x/')).toBeInstanceOf(HttpModelSource);
    expect(() => openBrowserModelSource('hf:not-an-id')).toThrow('is not a Hub model id');
  });
});
