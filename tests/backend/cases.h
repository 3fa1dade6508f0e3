// The problems every backend is run on. Each list is built per backend, so the same cases run on
// the CPU and (label gpu) on CUDA; CUDA lists leave out fp32, which only the CPU backend does.
#pragma once

#include "support/test_support.h"

#include <vector>

namespace flashattn::testing {

// Dense problems: every dtype, head dims 1..256 (40, 59, 96, 256 included), odd sizes, every
// feature alone and combined, strided layouts, rows that see no key, a few larger problems.
std::vector<Case> attention_cases(Backend backend);
// Packed variable-length problems: empty sequences, seqused_k, spare rows, every feature.
std::vector<Case> varlen_cases(Backend backend);

// A dense problem of these sizes, every feature off (the lists start from it and edit).
Case dense_case(fa_dtype dtype, int batch, int seqlen_q, int seqlen_k, int heads, int heads_k, int head_dim);

// Test name of a case: what it is (describe() without the backend), unique within its list.
std::string case_name(const Case& c);
// A list ready to run on `backend`: each case named (case_name, numbered where names repeat) and
// seeded from its name, those the backend cannot run dropped (fp32 on CUDA).
std::vector<Case> named_cases(std::vector<Case> cases, Backend backend);

class Attention : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override { FA_SKIP_IF_UNAVAILABLE(GetParam().backend); }
};

class VarlenAttention : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override { FA_SKIP_IF_UNAVAILABLE(GetParam().backend); }
};

inline std::string param_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

} // namespace flashattn::testing
