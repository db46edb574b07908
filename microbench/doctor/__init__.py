"""The ``doctor`` verb: when a multi-node launch hangs or crawls, name the layer that is broken (docs/doctor.md).

Every rank walks the layers bottom-up (launch, software, MPI, network, placement, torch.distributed, bandwidth)
while reporting to one coordinator over a control plane of the doctor's own (TCP, apart from MPI and torch,
which are what it examines), so a rank that does not finish a layer is named by host, rank and layer from what
the others reported.
"""
