// The dispatch table of docs/DISPATCH.md, printed by the planner's own decision (decide in
// hip/dispatch.h) for fixed descriptions of GPUs; tests/test_dispatch_doc.py compiles this with the
// system C++ compiler (no GPU toolchain) and compares the output with the document.
#include <stdio.h>
#include <string.h>

#include <string>
#include <utility>
#include <vector>

#include "dispatch.h"

namespace {

using namespace radiance;

// A GPU as the decision sees it: the answers LiveFacts (hip/apply.hip) would give there.
struct Gpu {
    const char *name;
    int sm, wmma_arch;
    bool wmma_ok, wgmma_built, cluster_launch;
    int64_t smem_optin, sm_count, split_k_clusters;
    bool tile_maps, pipe_x_map, pipe_w_map;  // what the driver grants (refusals: the fallback tables)
    bool mfma = false, mfma_ok = false;    // CDNA's MFMA layout, its self-check passed
    bool out_map = true;                   // the output's tensor map granted (n % 8 == 0, aligned)
};

struct FixedFacts {
    const Gpu &g;
    int sm() { return g.sm; }
    int wmma_arch() { return g.wmma_arch; }
    bool wmma_usable(int, bool) { return g.wmma_ok; }
    bool mfma_device() { return g.mfma; }
    bool mfma_usable(bool) { return g.mfma_ok; }
    bool wgmma_built() { return g.wgmma_built; }
    int64_t smem_optin() { return g.smem_optin; }
    int64_t sm_count() { return g.sm_count; }
    bool cluster_launch() { return g.cluster_launch; }
    int64_t split_k_clusters() { return g.split_k_clusters; }
    bool tile_maps(int, int) { return g.tile_maps; }
    bool out_map(int) { return g.out_map; }
    bool pipe_x_map(int) { return g.pipe_x_map; }
    bool pipe_w_map() { return g.pipe_w_map; }
};

/* how a stream kernel's steps meet k, where its scales come from, and what its mmas sum, each from
 * the plan's own fields */
std::string supers(const Dispatch &d)
{
    std::string s = d.whole_super ? ", whole super-steps" : d.tail_super ? ", whole super-steps but the last" : "";
    if (d.ring_scales) s += d.whole_super ? ", scales in the ring" : ", scales' windows in the ring";
    if (d.biased_codes) s += ", biased codes";
    if (d.one_chain) s += ", one mma chain";
    if (d.k_shift != 0) s += d.k_shift > 0 ? ", block 0's half a step longer" : ", block 1's half a step longer";
    return s;
}

std::string describe(const Dispatch &d)
{
    char buf[256];
    switch (d.path) {
    case ApplyPath::kVector:
        snprintf(buf, sizeof buf, "vector, %d-token tiles, k %s (apply_vector)", d.tokens,
                 d.vector_staged ? "staged in LDS" : "resident in LDS");
        break;
    case ApplyPath::kMma:
        snprintf(buf, sizeof buf, "mma.sync register pipe, %d steps ahead, registers for %d blocks per SM (apply_mma)",
                 d.mma_prefetch, d.mma_min_blocks);
        break;
    case ApplyPath::kTile:
        snprintf(buf, sizeof buf, "tiled mma.sync, %d tokens per warp (apply_mma)", 8 * d.token_tiles);
        break;
    case ApplyPath::kStream:
        snprintf(buf, sizeof buf, "stream, tokens past m %s%s%s (apply_stream)", d.x_mode == kXClamp ? "clamped" : "skipped",
                 supers(d).c_str(), d.pair_block0 > 0 ? ", the last wave in halves of k" : "");
        break;
    case ApplyPath::kStreamSharedX:
        if (d.k_parts == 2 && d.super_step != 4)
            snprintf(buf, sizeof buf,
                     "stream, k split over a cluster pair, x in shared memory, %d warps, %d-step super-steps in %d slots%s "
                     "(apply_stream)",
                     d.warps, d.super_step, d.ring_slots, supers(d).c_str());
        else if (d.k_parts == 2)
            snprintf(buf, sizeof buf, "stream, k split over a cluster pair, x in shared memory, %d warps%s (apply_stream)",
                     d.warps, supers(d).c_str());
        else
            snprintf(buf, sizeof buf, "stream, x in shared memory, %d warps%s (apply_stream)", d.warps,
                     supers(d).c_str());
        break;
    case ApplyPath::kWgmma:
        snprintf(buf, sizeof buf, "wgmma pipe, %d tokens, %d warpgroups, %s%s (apply_wgmma_pipe)", d.tokens,
                 d.halves == 1 ? 4 : 2,
                 d.copy == kCopyTma ? "TMA copies" : d.copy == kCopyTmaX ? "x by TMA, weights by cp.async" : "cp.async copies",
                 d.running_scale ? ", running scale" : "");
        break;
    case ApplyPath::kWgmmaWs:
        snprintf(buf, sizeof buf, "wgmma warp-specialized, %d tokens, %d consumer warpgroups, A-fragment sets %d, %s (apply_wgmma_ws)",
                 d.tokens, d.consumer_wgs, d.a_sets, d.blocks > 0 ? "persistent" : "a block per tile");
        break;
    case ApplyPath::kWgmmaFold:
        snprintf(buf, sizeof buf, "wgmma, scale folded into the weights, %d tokens, %d consumer warpgroup%s, persistent%s%s (apply_wgmma_fold)",
                 d.tokens, d.consumer_wgs, d.consumer_wgs == 1 ? "" : "s", d.fold_blocks_per_sm == 2 ? ", two blocks per SM" : "",
                 d.fold_tstore ? ", written by TMA" : "");
        break;
    case ApplyPath::kWmma:
        snprintf(buf, sizeof buf, "WMMA gfx%d, %d tokens per wave (apply_wmma)", d.wmma_arch, 16 * d.token_tiles);
        break;
    case ApplyPath::kMfma: snprintf(buf, sizeof buf, "MFMA, %d tokens per wave (apply_mfma)", 16 * d.token_tiles); break;
    }
    return buf;
}

using Rows = std::vector<std::pair<std::string, std::string>>; // (token range, kernel)

// The head's rows n in the tables but where one names its own (Qwen 14B/32B's 248320)
constexpr int64_t kDefaultRows = 248320;

// The token ranges of one (group, k) with the same kernel, m = 1 .. max_m, for a head of n rows.
Rows rows_of(const Gpu &g, int group, int64_t k, int64_t max_m, int64_t n)
{
    FixedFacts f{g};
    Rows rows;
    std::string last;
    int64_t first = 1;
    for (int64_t m = 1; m <= max_m + 1; m++) {
        const std::string now = m <= max_m ? describe(decide(Call{m, n, k, group}, f, 0)) : "";
        if (m > 1 && now != last) {
            char range[48];
            if (m - 1 == max_m) snprintf(range, sizeof range, "%lld and more", (long long)first);
            else if (first == m - 1) snprintf(range, sizeof range, "%lld", (long long)first);
            else snprintf(range, sizeof range, "%lld-%lld", (long long)first, (long long)(m - 1));
            rows.emplace_back(range, last);
            first = m;
        }
        last = now;
    }
    return rows;
}

std::string join(const std::vector<std::string> &items, size_t all)
{
    if (items.size() == all && all > 1) return "all";
    std::string out;
    for (const std::string &item : items) out += (out.empty() ? "" : ", ") + item;
    return out;
}

// One table per GPU (and head rows n, which only the folding kernel's tiles of two blocks per SM
// depend on): the ks of a group with the same rows share them, and so do groups with the same rows
// for the same ks.
void table(const Gpu &g, const std::vector<int> &groups, const std::vector<int64_t> &ks, int64_t max_m,
           int64_t n = kDefaultRows)
{
    struct Block {
        std::vector<std::string> groups, ks;
        Rows rows;
    };
    std::vector<Block> blocks;
    for (int group : groups) {
        std::vector<Block> mine;
        for (int64_t k : ks) {
            if (k % group != 0) continue;
            const Rows rows = rows_of(g, group, k, max_m, n);
            Block *same = nullptr;
            for (Block &b : mine)
                if (b.rows == rows) same = &b;
            if (same == nullptr) {
                mine.push_back(Block{{std::to_string(group)}, {}, rows});
                same = &mine.back();
            }
            same->ks.push_back(std::to_string(k));
        }
        for (const Block &b : mine) {
            Block *same = nullptr;
            for (Block &o : blocks)
                if (o.rows == b.rows && o.ks == b.ks) same = &o;
            if (same == nullptr) blocks.push_back(b);
            else same->groups.push_back(b.groups[0]);
        }
    }
    if (n == kDefaultRows) printf("\n### %s\n", g.name);
    else printf("\n### %s, a head of %lld rows\n", g.name, (long long)n);
    printf("\n| group | k | tokens | kernel |\n|---|---|---|---|\n");
    for (const Block &b : blocks)
        for (const auto &row : b.rows)
            printf("| %s | %s | %s | %s |\n", join(b.groups, groups.size()).c_str(), join(b.ks, ks.size()).c_str(),
                   row.first.c_str(), row.second.c_str());
}

// More than 256 tokens on the folding kernel: how m is cut into launches (fold_split_tokens, then
// fold_tile for each call), per range of m from 257 to max_m, for each k of ks (the tables above stop
// at 300 tokens, where the tile of one chunk no longer says it).
std::string launches(const Gpu &g, int64_t m, int64_t k)
{
    FixedFacts f{g};
    const Call c{m, kDefaultRows, k, 128};
    const int64_t first = fold_split_tokens(c, f, 0);
    const auto chunks = [&](int64_t tokens) {
        char buf[64];
        snprintf(buf, sizeof buf, "%lld x %d", (long long)((tokens + 255) / 256), fold_tile(tokens, k).tokens);
        return std::string(buf);
    };
    if (first == 0) return "one launch: " + chunks(m);
    return "two: " + chunks(first) + ", then the rest as 1 x " + std::to_string(fold_tile(m - first, k).tokens);
}

void launches_table(const Gpu &g, const std::vector<int64_t> &ks, int64_t max_m)
{
    printf("\n### %s, more than 256 tokens: the folding kernel's launches (chunks x tokens a chunk)\n", g.name);
    printf("\n| k | tokens | launches |\n|---|---|---|\n");
    for (int64_t k : ks) {
        int64_t first = 257;
        for (int64_t m = 258; m <= max_m + 1; m++) {
            if (m <= max_m && launches(g, m, k) == launches(g, first, k)) continue;
            const std::string range =
                first == m - 1 ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(m - 1);
            printf("| %lld | %s | %s |\n", (long long)k, range.c_str(), launches(g, first, k).c_str());
            first = m;
        }
    }
}

} // namespace

int main()
{
    // H200 / H100: 227 KiB opt-in shared memory, 132 SMs, 66 split-k cluster pairs
    const Gpu h200 = {"NVIDIA H100 / H200 (sm_90, the library's sm_90a kernels)", 90, 0, false, true, true,
                      232448, 132, 66, true, true, true};
    const Gpu sm90_no_a = {"NVIDIA sm_90 or newer without an sm_90a kernel for it (e.g. B200 through the build's PTX)",
                           90, 0, false, false, true, 232448, 132, 66, true, true, true};
    const Gpu a100 = {"NVIDIA A100 (sm_80; sm_86 / sm_89 alike but for the shared memory)", 80, 0, false, false,
                      true, 166912, 108, 0, false, false, false};
    const Gpu turing = {"NVIDIA before sm_80 (only in a build with RADIANCE_GPU_ARCHS naming it)", 75, 0, false, false, true, 65536, 40, 0, false, false, false};
    const Gpu rdna4 = {"AMD RDNA4 (gfx12), WMMA self-check passed", 0, 12, true, false, false, 65536, 64, 0, false,
                       false, false};
    const Gpu rdna3 = {"AMD RDNA3 (gfx11), WMMA self-check passed", 0, 11, true, false, false, 65536, 48, 0, false,
                       false, false};
    const Gpu cdna = {"AMD CDNA (gfx90a, gfx942), MFMA self-check passed", 0, 0, false, false, false, 65536, 304, 0,
                      false, false, false, true, true};
    const Gpu amd_vector = {"AMD CDNA with RADIANCE_AMD_MFMA=0 or a failed self-check, RDNA with RADIANCE_AMD_WMMA=0 "
                            "or a failed self-check, other AMD GPUs", 0, 0, false, false, false, 65536, 304, 0, false,
                            false, false};
    const Gpu h200_no_tile = {"H200, the folding kernel's tensor maps refused", 90, 0, false, true, true,
                            232448, 132, 66, false, true, true};
    const Gpu h200_no_w = {"H200, only the activations' tensor map granted", 90, 0, false, true, true, 232448, 132,
                           66, false, true, false};
    const Gpu h200_no_maps = {"H200, every tensor map refused", 90, 0, false, true, true, 232448, 132, 66, false,
                              false, false};

    // the heads of docs/PERF_LOG.md: SmolLM2 576, Gemma 3 270M 640, Qwen3 0.6B 1024, Llama 3.2 1B 2048, Llama 3 8B 4096,
    // Qwen 14B/32B 5120, Gemma 3 27B 5376, and 8192 (past the split-k kernel's shared memory)
    const std::vector<int64_t> ks = {576, 640, 1024, 2048, 4096, 5120, 5376, 8192};
    const std::vector<int> big = {128, 256}, all = {32, 64, 128, 256};
    table(h200, all, ks, 300);
    table(sm90_no_a, big, ks, 300);
    table(a100, all, ks, 300);
    table(turing, {128}, {1024, 5120}, 300);
    table(rdna4, {128}, {1024, 5120}, 300);
    table(rdna3, {128}, {1024, 5120}, 300);
    table(cdna, {128}, {1024, 5120}, 300);
    table(amd_vector, {128}, {1024, 5120}, 300);
    table(h200_no_tile, {128}, {5120}, 300);
    table(h200_no_w, {128}, {5120}, 300);
    table(h200_no_maps, {128}, {5120}, 300);
    Gpu h200_no_out = h200;
    h200_no_out.name = "H200, the output's tensor map refused (n % 8 != 0, or an output not 16-byte aligned)";
    h200_no_out.out_map = false;
    table(h200_no_out, {128}, {5120}, 300);
    // the heads where the folding kernel's tiles of two blocks per SM fill the last round of tiles
    // better: Llama 3 8B's 128256 rows, Gemma 3's 262144 (Gemma 3 27B's 5376 columns: not enough)
    table(h200, {128}, {2048, 4096}, 300, 128256);
    table(h200, {128}, {640, 5376}, 300, 262144);
    launches_table(h200, {4096, 5120}, 1024);
    return 0;
}
