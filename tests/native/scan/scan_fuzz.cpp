// Fuzz driver for the model scanner, built under ASan/UBSan by
// tests/test_scan.py: every file given, then seeded mutations of it (bytes
// flipped, runs overwritten with varint-looking bytes, truncations, bytes
// inserted), each in a buffer of exactly its size (one byte read past the end
// is an ASan error). The scanner must return a status for each, never crash;
// after an OK scan every array must be self-consistent (offsets in range,
// spans inside the buffer, ids inside the string table), the initializers'
// and the attribute tensors' columns alike. The same bytes are also scanned as
// several graphs at once (gos_scan_graphs: a scanned model's graph field given
// 1-3 times, else the buffer cut at random), each graph's rows and strings apart.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gelu_onnx_scan.h"

namespace {

uint64_t rng_state = 0x243F6A8885A308D3ull;

uint64_t rnd() {  // xorshift64*
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

int fail(const char* what) {
  std::fprintf(stderr, "inconsistent scan: %s\n", what);
  std::abort();
}

void check_csr(const gos_result* r, const char* off_name, const char* ids_name, int64_t rows, int64_t nstr) {
  const int32_t* off;
  const int32_t* ids;
  int64_t noff = gos_i32(r, off_name, &off);
  int64_t nids = gos_i32(r, ids_name, &ids);
  if (noff != rows + 1 || off[0] != 0 || off[rows] != nids) fail(off_name);
  for (int64_t i = 0; i < rows; ++i)
    if (off[i + 1] < off[i]) fail(off_name);
  for (int64_t k = 0; k < nids; ++k)
    if (ids[k] < 0 || ids[k] >= nstr) fail(ids_name);
}

void check_spans(const gos_result* r, const char* a, const char* b, size_t size) {
  const int32_t* s;
  const int32_t* e;
  int64_t n = gos_i32(r, a, &s);
  if (gos_i32(r, b, &e) != n) fail(a);
  for (int64_t i = 0; i < n; ++i)
    if (s[i] < 0 || e[i] < s[i] || size_t(e[i]) > size) fail(a);
}

// One per-tensor column set ("init_" or "at_"): rows tensors, each column
// that long, dims by an offset array, raw_data inside the tensor's field.
int64_t check_tensors(const gos_result* r, const char* prefix, size_t size) {
  auto col32 = [&](const char* c, const int32_t** out) {
    char name[32];
    std::snprintf(name, sizeof name, "%s%s", prefix, c);
    return gos_i32(r, name, out);
  };
  auto col64 = [&](const char* c, const int64_t** out) {
    char name[32];
    std::snprintf(name, sizeof name, "%s%s", prefix, c);
    return gos_i64(r, name, out);
  };
  const int32_t *dtype, *dims_off, *start, *end, *raw_start, *raw_len, *x;
  const int64_t *dims, *typed, *y;
  int64_t n = col32("dtype", &dtype);
  for (const char* c : {"flags", "ext", "start", "end", "raw_start", "raw_len"})
    if (col32(c, &x) != n) fail(c);
  if (col64("loc", &y) != n || col64("typed", &typed) != 6 * n) fail("loc / typed");
  int64_t ndims = col64("dims", &dims);
  if (col32("dims_off", &dims_off) != n + 1 || dims_off[0] != 0 || dims_off[n] != ndims) fail("dims_off");
  col32("start", &start);
  col32("end", &end);
  col32("raw_start", &raw_start);
  col32("raw_len", &raw_len);
  for (int64_t k = 0; k < n; ++k) {
    if (dims_off[k + 1] < dims_off[k]) fail("dims_off");
    if (start[k] < 0 || end[k] < start[k] || size_t(end[k]) > size) fail("tensor span");
    if ((raw_len[k] < 0) != (raw_start[k] < 0)) fail("raw_data");
    if (raw_len[k] >= 0 && (raw_start[k] < start[k] || raw_start[k] + int64_t(raw_len[k]) > end[k])) fail("raw_data");
    for (int j = 0; j < 6; ++j)
      if (typed[6 * k + j] < 0) fail("typed");
  }
  return n;
}

void check(const gos_result* r, size_t size) {
  if (gos_status(r) != GOS_OK) return;
  const int32_t* off;
  int64_t nstr = gos_i32(r, "str_off", &off) - 1;
  const char* blob;
  int64_t nblob = gos_blob(r, &blob);
  if (nstr < 1 || off[nstr] != nblob) fail("str_off");
  const int32_t* op;
  int64_t nodes = gos_i32(r, "node_op", &op);
  check_csr(r, "node_in_off", "in_ids", nodes, nstr);
  check_csr(r, "node_out_off", "out_ids", nodes, nstr);
  const int32_t* attr_off;
  if (gos_i32(r, "node_attr_off", &attr_off) != nodes + 1) fail("node_attr_off");
  check_spans(r, "node_start", "node_end", size);
  check_spans(r, "attr_start", "attr_end", size);
  check_spans(r, "vi_start", "vi_end", size);
  const int32_t* init_name;
  if (check_tensors(r, "init_", size) != gos_i32(r, "init_name", &init_name)) fail("init_name");
  // each attribute tensor inside its attribute, at most one per attribute, in order
  const int32_t *at_attr, *at_start, *at_end, *attr_start, *attr_end;
  int64_t nat = check_tensors(r, "at_", size);
  int64_t nattr = gos_i32(r, "attr_start", &attr_start);
  gos_i32(r, "attr_end", &attr_end);
  if (gos_i32(r, "at_attr", &at_attr) != nat) fail("at_attr");
  gos_i32(r, "at_start", &at_start);
  gos_i32(r, "at_end", &at_end);
  for (int64_t k = 0; k < nat; ++k) {
    int32_t a = at_attr[k];
    if (a < 0 || a >= nattr || (k && a <= at_attr[k - 1])) fail("at_attr");
    if (at_start[k] < attr_start[a] || at_end[k] > attr_end[a]) fail("at span");
  }
  for (const char* name : {"node_op", "node_dom", "node_name", "attr_name", "init_name", "input_name",
                           "output_name", "vi_name"}) {
    const int32_t* ids;
    int64_t n = gos_i32(r, name, &ids);
    for (int64_t k = 0; k < n; ++k)
      if (ids[k] < 0 || ids[k] >= nstr) fail(name);
  }
  // each graph's rows in order, its strings its own: found in that graph only
  const int32_t *gn, *gs;
  int64_t graphs = gos_i32(r, "graph_nodes", &gn) - 1;
  if (graphs < 0 || gos_i32(r, "graph_strs", &gs) != graphs + 1 || gn[graphs] != nodes || gs[graphs] != nstr)
    fail("graph_*");
  for (int64_t g = 0; g < graphs; ++g) {
    if (gn[g + 1] < gn[g] || gs[g + 1] <= gs[g] || off[gs[g] + 1] - off[gs[g]] != 1) fail("graph_*");
    for (int64_t i = gn[g]; i < gn[g + 1]; ++i)
      if (op[i] < gs[g] || op[i] >= gs[g + 1]) fail("a node's op outside its graph's strings");
    for (int64_t k = gs[g]; k < gs[g + 1]; ++k)
      if (gos_find(r, g, blob + off[k], off[k + 1] - off[k] - 1) != k) fail("gos_find");
  }
}

void scan_graphs(const std::vector<uint8_t>& bytes, const gos_result* model) {
  std::vector<uint8_t> data;
  std::vector<int64_t> cuts{0};
  const int64_t* info;
  if (gos_status(model) == GOS_OK && gos_i64(model, "model_info", &info) == 3) {
    for (uint64_t k = 0, n = 1 + rnd() % 3; k < n; ++k) {
      data.insert(data.end(), bytes.begin() + info[1], bytes.begin() + info[2]);
      cuts.push_back(int64_t(data.size()));
    }
  } else {
    data = bytes;
    for (uint64_t k = 0, n = rnd() % 3; k < n && !data.empty(); ++k) cuts.push_back(int64_t(rnd() % data.size()));
    cuts.push_back(int64_t(data.size()));
    std::sort(cuts.begin(), cuts.end());
  }
  uint8_t* buf = static_cast<uint8_t*>(std::malloc(data.size() ? data.size() : 1));
  if (!data.empty()) std::memcpy(buf, data.data(), data.size());
  gos_result* r = gos_scan_graphs(buf, data.size(), cuts.data(), int64_t(cuts.size()) - 1);
  if (r == nullptr) fail("no result");
  check(r, data.size());
  gos_free(r);
  std::free(buf);
}

void one(const std::vector<uint8_t>& bytes, long* counts) {
  // exactly sized: ASan sees one byte past the end
  uint8_t* buf = static_cast<uint8_t*>(std::malloc(bytes.size() ? bytes.size() : 1));
  if (!bytes.empty()) std::memcpy(buf, bytes.data(), bytes.size());
  gos_result* r = gos_scan(buf, bytes.size());
  if (r == nullptr) fail("no result");
  counts[gos_status(r)]++;
  check(r, bytes.size());
  scan_graphs(bytes, r);
  gos_free(r);
  std::free(buf);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: scan_fuzz MUTATIONS_PER_FILE FILE...\n");
    return 2;
  }
  long per_file = std::atol(argv[1]);
  long counts[3] = {0, 0, 0};
  for (int a = 2; a < argc; ++a) {
    FILE* f = std::fopen(argv[a], "rb");
    if (!f) return 2;
    std::vector<uint8_t> data;
    uint8_t chunk[65536];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) data.insert(data.end(), chunk, chunk + got);
    std::fclose(f);
    one(data, counts);
    for (long k = 0; k < per_file; ++k) {
      std::vector<uint8_t> m = data;
      switch (rnd() % 4) {
        case 0:  // flip a few bytes
          for (int j = 0, n = 1 + int(rnd() % 4); j < n && !m.empty(); ++j) m[rnd() % m.size()] ^= uint8_t(rnd());
          break;
        case 1:  // a run of continuation bytes (long varints, huge lengths)
          if (!m.empty()) {
            size_t at = rnd() % m.size();
            for (size_t j = at; j < m.size() && j < at + 1 + rnd() % 12; ++j) m[j] = uint8_t(0x80 | rnd());
          }
          break;
        case 2:  // truncate
          m.resize(m.empty() ? 0 : rnd() % m.size());
          break;
        default:  // insert bytes
          m.insert(m.begin() + (m.empty() ? 0 : rnd() % m.size()), 1 + rnd() % 8, uint8_t(rnd()));
      }
      one(m, counts);
    }
  }
  std::printf("ok %ld malformed %ld unsupported %ld\n", counts[0], counts[1], counts[2]);
  return 0;
}
