"""Live page-fault and page-zeroing activity (Linux): the stream of `memcost-probe monitor` samples, the sampler that turns them into rates, and the sinks."""
