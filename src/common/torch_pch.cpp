// Anchor TU for the shared LibTorch precompiled header (see cmake/HLPDependencies.cmake).
// Every LibTorch-heavy library reuses this PCH instead of parsing <torch/torch.h> per file.
