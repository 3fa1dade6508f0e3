// Device copies of host buffers for the CUDA cases of the backend tests. Tests build every buffer on
// the host; a CUDA call mirrors them all on the device, runs, and copies the outputs back, so every
// check (reference comparison, NaN poison, untouched gaps) is the same code for both backends.
//
// Built with FLASHATTN_TESTS_WITH_CUDA only when the library has the CUDA backend; otherwise every
// function reports that it is not available (CUDA cases are skipped before they get here).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace flashattn::testing {

class DeviceMirror {
public:
    DeviceMirror() = default;
    DeviceMirror(const DeviceMirror&) = delete;
    DeviceMirror& operator=(const DeviceMirror&) = delete;
    ~DeviceMirror();

    // Copies `bytes` of host memory to a new device allocation and returns its address (nullptr
    // for nullptr). `is_output` regions are copied back by copy_outputs_back().
    void* mirror(const void* host, size_t bytes, bool is_output);
    // Waits for the device, then copies every output region back to its host buffer.
    void copy_outputs_back();

private:
    struct Region {
        void* host;
        void* device;
        size_t bytes;
        bool is_output;
    };
    std::vector<Region> regions_;
};

} // namespace flashattn::testing
