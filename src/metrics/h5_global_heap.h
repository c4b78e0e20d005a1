#pragma once
// A check of an HDF5 file's global heap collections (where variable-length strings such as the
// result files' attributes live), run before libhdf5 reads from them.
//
// libhdf5 1.10.8 (Debian 12) trusts each heap object's size field: an object that claims more
// bytes than its collection holds makes H5HG_read copy past the collection (an out-of-bounds
// read, found by fuzzing: tests/fuzz/regressions/result_file/). Collections are found by their
// signature ("GCOL", version 1, 3 zero bytes, a size of 4 KiB up to the file's end); each
// object must fit inside its collection. Assumes HDF5's default 8-byte lengths (HLP's files).
#include <string>

namespace hlp::metrics::h5 {

// Throws hlp::UserError naming `path` and the collection's offset when an object overflows.
void check_global_heaps(const std::string& path);

}  // namespace hlp::metrics::h5
