#include "runner.h"

#include <flashattn/flashattn.hpp>

#include <algorithm>
#include <functional>

namespace flashattn::cli {
namespace {

template <typename T>
size_t byte_size(const std::vector<T>& v) { return v.size() * sizeof(T); }

// A copy of the workload on the device, plus room for everything the library writes.
struct DeviceCopy {
    DeviceBuffer q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi, dout, dq, dk, dv, sink, dsink;
    Bindings at;

    DeviceCopy(Device& device, const Workload& work, const Outputs& outputs) {
        auto upload = [&](const void* host, size_t bytes) {
            DeviceBuffer buffer(device, bytes);
            if (bytes > 0) device.upload(buffer.get(), host, bytes);
            return buffer;
        };
        q = upload(work.q.bytes.data(), work.q.bytes.size());
        k = upload(work.k.bytes.data(), work.k.bytes.size());
        v = upload(work.v.bytes.data(), work.v.bytes.size());
        dout = upload(work.dout.bytes.data(), work.dout.bytes.size());
        cu_seqlens_q = upload(work.cu_seqlens_q.data(), byte_size(work.cu_seqlens_q));
        cu_seqlens_k = upload(work.cu_seqlens_k.data(), byte_size(work.cu_seqlens_k));
        alibi = upload(work.alibi_slopes.data(), byte_size(work.alibi_slopes));
        out = DeviceBuffer(device, outputs.out.bytes.size());
        lse = DeviceBuffer(device, byte_size(outputs.lse));
        dq = DeviceBuffer(device, outputs.dq.bytes.size());
        dk = DeviceBuffer(device, outputs.dk.bytes.size());
        dv = DeviceBuffer(device, outputs.dv.bytes.size());
        sink = upload(work.learnable_sink.data(), byte_size(work.learnable_sink));
        dsink = DeviceBuffer(device, byte_size(outputs.dsink));
        at = Bindings{q.get(), k.get(), v.get(), out.get(), lse.get<float>(),
                      cu_seqlens_q.get<const int32_t>(), cu_seqlens_k.get<const int32_t>(), alibi.get<const float>(),
                      dout.get(), dq.get(), dk.get(), dv.get(), sink.get<const float>(), dsink.get<float>()};
    }
};

void download(Device& device, void* host, const DeviceBuffer& from) {
    if (from.bytes() > 0) device.download(host, from.get(), from.bytes());
}

void require_ok(fa_status status, const char* pass) {
    if (status != FA_OK)
        throw Error(status, std::string(pass) + " failed: " + fa_status_name(status) + ": " + fa_last_error());
}

// warmup + iters calls of `call`, the last `iters` timed.
Timing repeat(Device& device, int warmup, int iters, Progress& progress, const std::string& label,
              const std::function<fa_status()>& call, const char* pass) {
    Timing timing;
    progress.begin(label, warmup + iters);
    for (int i = 0; i < warmup + iters; ++i) {
        fa_status status = FA_OK;
        const double ms = device.time_ms([&] { status = call(); });
        require_ok(status, pass);
        if (i >= warmup) timing.ms.push_back(ms);
        progress.advance(i + 1);
    }
    progress.end();
    return timing;
}

} // namespace

double Timing::median_ms() const {
    if (ms.empty()) return 0.0;
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double Timing::min_ms() const { return ms.empty() ? 0.0 : *std::min_element(ms.begin(), ms.end()); }

RunResult run_attention(const Workload& work, Outputs& outputs, Device& device, const RunConfig& config,
                        Progress& progress, const std::string& label) {
    DeviceCopy copy(device, work, outputs);
    const bool varlen = work.spec.varlen;
    RunResult result;

    const fa_fwd_params fwd = forward_params(work, copy.at, device.backend());
    result.forward = repeat(device, config.warmup, config.iters, progress, label + "forward iterations", [&] {
        return varlen ? fa_varlen_forward(&fwd) : fa_forward(&fwd);
    }, "forward");
    download(device, outputs.out.bytes.data(), copy.out);
    download(device, outputs.lse.data(), copy.lse);
    if (!config.backward) return result;

    const fa_bwd_params bwd = backward_params(work, copy.at, device.backend(), config.deterministic);
    auto backward = [&] { return varlen ? fa_varlen_backward(&bwd) : fa_backward(&bwd); };
    result.backward = repeat(device, config.warmup, config.iters, progress, label + "backward iterations", backward, "backward");
    download(device, outputs.dq.bytes.data(), copy.dq);
    download(device, outputs.dk.bytes.data(), copy.dk);
    download(device, outputs.dv.bytes.data(), copy.dv);
    download(device, outputs.dsink.data(), copy.dsink);

    if (config.deterministic) {
        require_ok(backward(), "backward");
        Outputs again = make_outputs(work, true);
        download(device, again.dq.bytes.data(), copy.dq);
        download(device, again.dk.bytes.data(), copy.dk);
        download(device, again.dv.bytes.data(), copy.dv);
        download(device, again.dsink.data(), copy.dsink);
        result.reproducibility_checked = true;
        result.reproducible = again.dq.bytes == outputs.dq.bytes && again.dk.bytes == outputs.dk.bytes &&
                              again.dv.bytes == outputs.dv.bytes && again.dsink == outputs.dsink;
    }
    return result;
}

} // namespace flashattn::cli
