// flashsample: exact next-token sampling fused into the LM-head matrix product.
export { open, gpuStatus, Device } from './device';
export type { DeviceSpec, DeviceKind, GpuStatus } from './device';
export { Tensor } from './tensor';
export { Sampler, CudaGraph, ROW_FIELDS, MAX_LIST_CAPACITY } from './sampler';
export type { SamplerConfig, SamplerShardConfig, RowFilter, RowValues, Rows, RowLayout, EnqueueArgs, PenaltyTable } from './sampler';
export type { TensorData } from './tensor';
export { sampleFused, sampleFusedInto, sampleReference, timeSampler, measureReadBandwidth } from './sample';
export type { SampleResult, SamplerKind } from './sample';
export type { SampleOptions, ReferenceOptions } from './options';
export { mergePartials, sampleFusedTP, sampleSharded, PartialState, decodePartial, partialBytes, MAX_SHARDS, MAX_PARTIAL_CANDIDATES } from './parallel';
export type { ShardOptions, MergeResult, DecodedPartial, TPOptions, TPShard } from './parallel';
export { nccl, Communicator } from './nccl';
export type { NcclStatus, CommOptions } from './nccl';
export { MAX_TOP_LOGPROBS } from './options';
export { encodeBF16, decodeBF16, encodeF16, decodeF16 } from './dtype';
export type { DType, FloatDType } from './dtype';
export { philox4x32_10, gumbelFromBits } from './noise';
