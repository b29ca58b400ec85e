// Rotary position embedding tables, computed once in float64 on the CPU: GPU sin/cos lose accuracy
// at large angles, and a table makes the kernel a pair of loads.
import type { ModelConfig } from './model/types.ts';

/** inv_freq[i] = theta^(-2i/D), adjusted for rope_scaling as transformers does. */
export function inverseFrequencies(config: ModelConfig): Float64Array {
  const half = config.headDim / 2;
  const inv = new Float64Array(half);
  for (let i = 0; i < half; i++) inv[i] = 1 / Math.pow(config.ropeTheta, (2 * i) / config.headDim);
  const scaling = config.ropeScaling;
  if (!scaling) return inv;
  if (scaling.type === 'linear') return inv.map((f) => f / scaling.factor);
  // llama3: long wavelengths are slowed by `factor`, short ones kept, the band between interpolated.
  const lowFreqWavelength = scaling.originalMaxPositions / scaling.lowFreqFactor;
  const highFreqWavelength = scaling.originalMaxPositions / scaling.highFreqFactor;
  return inv.map((f) => {
    const wavelength = (2 * Math.PI) / f;
    if (wavelength < highFreqWavelength) return f;
    if (wavelength > lowFreqWavelength) return f / scaling.factor;
    const smooth =
      (scaling.originalMaxPositions / wavelength - scaling.lowFreqFactor) / (scaling.highFreqFactor - scaling.lowFreqFactor);
    return (1 - smooth) * (f / scaling.factor) + smooth * f;
  });
}

/** (cos, sin) of position * inv_freq[i], laid out [positions, D/2, 2] as rope.wgsl reads it. */
export function ropeTable(config: ModelConfig, positions: number): Float64Array {
  const inv = inverseFrequencies(config);
  const half = inv.length;
  const table = new Float64Array(positions * half * 2);
  for (let pos = 0; pos < positions; pos++) {
    for (let i = 0; i < half; i++) {
      const angle = pos * inv[i];
      table[(pos * half + i) * 2] = Math.cos(angle);
      table[(pos * half + i) * 2 + 1] = Math.sin(angle);
    }
  }
  return table;
}
