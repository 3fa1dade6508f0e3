/*
 * A serving engine's decode loop over a paged KV cache, through the C ABI (flashattn.h).
 *
 *   build/examples/decode_loop            (built with the library; also run by ctest)
 *
 * Two sequences of different lengths share one pool of 16-row pages (vLLM's layout: num_blocks x
 * page_size x heads_k x head_dim); each step appends one token's keys and values to each sequence
 * and attends over its whole cache (GQA: 8 query heads on 2 KV heads). The engine owns every
 * buffer, including the scratch memory of a call (the workspace): the size depends on the shapes
 * and the device, not on the cache contents, so it is asked once and reused by every step.
 *
 * This file runs on the CPU backend (host memory, fp32) so that it runs anywhere. On CUDA the same
 * calls take device pointers (cudaMalloc), fp16/bf16, a stream in fwd.stream, and the workspace is
 * device memory of fa_kvcache_workspace_size bytes: with it, a step allocates nothing and can be
 * captured in a CUDA graph. The last step is checked against a plain softmax(q k^T / sqrt(d)) v.
 */
#include <flashattn/flashattn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 2, HEADS = 8, HEADS_K = 2, DIM = 64, PAGE = 16, MAX_BLOCKS = 8, STEPS = 5 };
enum { NUM_BLOCKS = BATCH * MAX_BLOCKS, CAPACITY = MAX_BLOCKS * PAGE };

static float uniform(unsigned* state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / (float)(1u << 24) - 0.5f;
}

static void fill(float* x, size_t n, unsigned* state) {
    for (size_t i = 0; i < n; ++i) x[i] = uniform(state);
}

/* Row j of sequence b in the pool (k or v), through the block table. */
static const float* cache_row(const float* pool, const int32_t* table, int b, int j, int head_k) {
    const int32_t block = table[b * MAX_BLOCKS + j / PAGE];
    return pool + (((size_t)block * PAGE + (size_t)(j % PAGE)) * HEADS_K + (size_t)head_k) * DIM;
}

int main(void) {
    unsigned rng = 12345;
    float* k_pool = malloc(sizeof(float) * NUM_BLOCKS * PAGE * HEADS_K * DIM);
    float* v_pool = malloc(sizeof(float) * NUM_BLOCKS * PAGE * HEADS_K * DIM);
    float q[BATCH * HEADS * DIM], out[BATCH * HEADS * DIM], lse[BATCH * HEADS];
    float k_new[BATCH * HEADS_K * DIM], v_new[BATCH * HEADS_K * DIM];
    int32_t table[BATCH * MAX_BLOCKS], lengths[BATCH] = {37, 90};
    if (!k_pool || !v_pool) return 1;
    fill(k_pool, (size_t)NUM_BLOCKS * PAGE * HEADS_K * DIM, &rng); /* as if prefilled */
    fill(v_pool, (size_t)NUM_BLOCKS * PAGE * HEADS_K * DIM, &rng);
    /* Pages handed out in a scrambled order, as an allocator would after some churn. */
    for (int i = 0; i < BATCH * MAX_BLOCKS; ++i) table[i] = (i * 7 + 3) % NUM_BLOCKS;

    fa_kvcache_params kv;
    fa_kvcache_params_init(&kv);
    fa_fwd_params* f = &kv.fwd;
    f->dtype = FA_FLOAT32; /* CPU only; CUDA takes FA_FLOAT16 / FA_BFLOAT16 */
    f->batch = BATCH;
    f->seqlen_q = 1;
    f->seqlen_k = CAPACITY; /* rows a sequence can hold: max_blocks_per_seq * page_size */
    f->num_heads = HEADS;
    f->num_heads_k = HEADS_K;
    f->head_dim = DIM;
    f->q = (fa_tensor){q, HEADS * DIM, HEADS * DIM, DIM};
    f->out = (fa_tensor){out, HEADS * DIM, HEADS * DIM, DIM};
    f->k = (fa_tensor){k_pool, PAGE * HEADS_K * DIM, HEADS_K * DIM, DIM}; /* batch_stride: block to block */
    f->v = (fa_tensor){v_pool, PAGE * HEADS_K * DIM, HEADS_K * DIM, DIM};
    f->softmax_lse = lse;
    f->causal = 1;
    f->block_table = table;
    f->block_table_batch_stride = MAX_BLOCKS;
    f->max_blocks_per_seq = MAX_BLOCKS;
    f->page_size = PAGE;
    f->num_blocks = NUM_BLOCKS;
    kv.cache_seqlens = lengths;
    kv.k_new = (fa_tensor){k_new, HEADS_K * DIM, HEADS_K * DIM, DIM};
    kv.v_new = (fa_tensor){v_new, HEADS_K * DIM, HEADS_K * DIM, DIM};
    kv.seqlen_new = 1;

    /* The call's scratch, once for the whole loop (0 bytes on the CPU backend). */
    const size_t workspace_size = fa_kvcache_workspace_size(&kv);
    void* workspace = workspace_size ? malloc(workspace_size) : NULL; /* CUDA: cudaMalloc */
    kv.workspace = workspace;
    kv.workspace_size = workspace_size;
    printf("decode_loop: %s, workspace %zu bytes\n", fa_version_string(), workspace_size);

    for (int step = 0; step < STEPS; ++step) {
        fill(q, sizeof q / sizeof q[0], &rng);
        fill(k_new, sizeof k_new / sizeof k_new[0], &rng);
        fill(v_new, sizeof v_new / sizeof v_new[0], &rng);
        if (fa_kvcache_forward(&kv) != FA_OK) {
            fprintf(stderr, "decode_loop: step %d: %s\n", step, fa_last_error());
            return 1;
        }
        if (step + 1 < STEPS)
            for (int b = 0; b < BATCH; ++b) ++lengths[b]; /* the engine advances the lengths */
    }

    /* The last step, recomputed plainly: each sequence attends to its rows [0, length + 1). */
    double worst = 0.0;
    for (int b = 0; b < BATCH; ++b)
        for (int h = 0; h < HEADS; ++h) {
            const int hk = h / (HEADS / HEADS_K), keys = lengths[b] + 1;
            const float* qh = q + (b * HEADS + h) * DIM;
            double scores[CAPACITY], max = -INFINITY, sum = 0.0;
            for (int j = 0; j < keys; ++j) {
                const float* k = cache_row(k_pool, table, b, j, hk);
                double s = 0.0;
                for (int d = 0; d < DIM; ++d) s += (double)qh[d] * k[d];
                scores[j] = s / sqrt((double)DIM);
                if (scores[j] > max) max = scores[j];
            }
            for (int j = 0; j < keys; ++j) sum += exp(scores[j] - max);
            for (int d = 0; d < DIM; ++d) {
                double o = 0.0;
                for (int j = 0; j < keys; ++j) o += exp(scores[j] - max) / sum * cache_row(v_pool, table, b, j, hk)[d];
                const double err = fabs(o - out[(b * HEADS + h) * DIM + d]);
                if (err > worst) worst = err;
            }
            const double err = fabs(max + log(sum) - lse[b * HEADS + h]);
            if (err > worst) worst = err;
        }
    printf("decode_loop: %d steps, lengths %d and %d, largest difference from the plain computation %.2e\n", STEPS,
           lengths[0] + 1, lengths[1] + 1, worst);
    free(workspace);
    free(k_pool);
    free(v_pool);
    return worst < 1e-4 ? 0 : 1;
}
