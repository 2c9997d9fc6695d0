// Fuzz driver for the model scanner, built under ASan/UBSan by
// tests/test_scan.py: every file given, then seeded mutations of it (bytes
// flipped, runs overwritten with varint-looking bytes, truncations, bytes
// inserted), each in a buffer of exactly its size (one byte read past the end
// is an ASan error). The scanner must return a status for each, never crash;
// after an OK scan every array must be self-consistent (offsets in range,
// spans inside the buffer, ids inside the string table).
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
  check_spans(r, "init_start", "init_end", size);
  check_spans(r, "vi_start", "vi_end", size);
  for (const char* name : {"node_op", "node_dom", "node_name", "attr_name", "init_name", "input_name",
                           "output_name", "vi_name"}) {
    const int32_t* ids;
    int64_t n = gos_i32(r, name, &ids);
    for (int64_t k = 0; k < n; ++k)
      if (ids[k] < 0 || ids[k] >= nstr) fail(name);
  }
  for (int64_t k = 0; k < nstr; ++k)
    if (gos_find(r, blob + off[k], off[k + 1] - off[k] - 1) != k) fail("gos_find");
}

void one(const std::vector<uint8_t>& bytes, long* counts) {
  // exactly sized: ASan sees one byte past the end
  uint8_t* buf = static_cast<uint8_t*>(std::malloc(bytes.size() ? bytes.size() : 1));
  if (!bytes.empty()) std::memcpy(buf, bytes.data(), bytes.size());
  gos_result* r = gos_scan(buf, bytes.size());
  if (r == nullptr) fail("no result");
  counts[gos_status(r)]++;
  check(r, bytes.size());
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
