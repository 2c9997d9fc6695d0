// gelu-onnx: one pass over a serialized ModelProto's main graph (see the header).
//
// Field numbers and wire types are onnx.proto's (ModelProto.graph = 7,
// GraphProto.node = 1, ...). Protobuf semantics mirrored here (upb, as in
// onnx's Python, and the C++ protobuf of ONNX Runtime): a singular scalar or
// string field given twice keeps the last value; repeated scalars accept
// packed and unpacked encodings; a known field with another wire type, a
// group (onnx.proto declares none) and a value outside a closed enum are
// unknown fields, which protobuf keeps and never reads: skipped here too, so
// the arrays describe what protobuf parsed. What protobuf would merge (a
// singular message twice, e.g. the graph field) makes the result
// GOS_UNSUPPORTED.
#include "gelu_onnx_scan.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

constexpr int32_t kVersion = 4;

enum Wire { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

// node_flags / attr_flags
constexpr int32_t NF_DEVICE = 1, NF_OVERLOAD = 2, NF_SUBGRAPH = 4, NF_REF = 8, NF_TENSOR = 16,
                  NF_TYPEPROTO = 32, NF_METADATA = 64;
// init_flags / at_flags (TensorCols::flags)
constexpr int32_t IF_SEGMENT = 1, IF_RAW = 2, IF_RAW_TWICE = 4, IF_METADATA = 8, IF_DOC = 16;
// str_flags
constexpr int32_t SF_BAD_UTF8 = 1, SF_NUL = 2;

struct Stop {  // thrown to end the scan with a status (caught in gos_scan)
  int status;
  const char* why;
};

[[noreturn]] void malformed(const char* why) { throw Stop{GOS_MALFORMED, why}; }
[[noreturn]] void unsupported(const char* why) { throw Stop{GOS_UNSUPPORTED, why}; }

// A field read off the wire: number, wire type, and where it lies.
struct Field {
  uint32_t num;
  int wt;
  const uint8_t* start;  // the key's first byte
  const uint8_t* val;    // the value (after the length for kLen)
  const uint8_t* end;    // one past the field
  uint64_t v;            // the value of a varint / fixed field
};

inline uint64_t varint(const uint8_t*& p, const uint8_t* end) {
  uint64_t r = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (p >= end) malformed("a varint runs past the end of its message");
    uint8_t b = *p++;
    if (shift == 63 && b > 1) malformed("a varint overflows 64 bits");
    r |= uint64_t(b & 0x7F) << shift;
    if (b < 0x80) return r;
  }
  malformed("a varint is longer than 10 bytes");
}

// The next field of the message [p, end); p moves past it (of a group,
// only past its key).
inline Field field(const uint8_t*& p, const uint8_t* end) {
  Field f{};
  f.start = p;
  uint64_t key = varint(p, end);
  if (key >> 32) malformed("a field number is out of range");
  f.num = uint32_t(key >> 3);
  f.wt = int(key & 7);
  if (f.num == 0) malformed("field number 0");
  if (f.num > 536870911u) malformed("a field number is out of range");
  switch (f.wt) {
    case kVarint:
      f.val = p;
      f.v = varint(p, end);
      break;
    case kFixed64:
      if (end - p < 8) malformed("a fixed64 runs past the end of its message");
      f.val = p;
      std::memcpy(&f.v, p, 8);
      p += 8;
      break;
    case kFixed32: {
      if (end - p < 4) malformed("a fixed32 runs past the end of its message");
      uint32_t x;
      std::memcpy(&x, p, 4);
      f.val = p;
      f.v = x;
      p += 4;
      break;
    }
    case kLen: {
      uint64_t n = varint(p, end);
      if (n > uint64_t(end - p)) malformed("a length runs past the end of its message");
      f.val = p;
      f.v = n;
      p += n;
      break;
    }
    case kStartGroup:
    case kEndGroup:
      f.val = p;
      break;
    default:
      malformed("an invalid wire type");
  }
  f.end = p;
  return f;
}

// Protobuf's nesting limit (upb's and C++'s default): it refuses deeper files.
constexpr int kMaxDepth = 100;

// The next field of the message [p, end), a group whole (an unknown field:
// onnx.proto declares no group; protobuf keeps it, groups nested in it too,
// up to its end-group tag); p moves past it.
inline Field next(const uint8_t*& p, const uint8_t* end) {
  Field f = field(p, end);
  if (f.wt == kEndGroup) malformed("an end-group tag outside its group");
  if (f.wt == kStartGroup) {
    uint32_t open[kMaxDepth];
    int depth = 0;
    open[depth++] = f.num;
    while (depth) {
      if (p >= end) malformed("a group runs past the end of its message");
      Field g = field(p, end);
      if (g.wt == kStartGroup) {
        if (depth == kMaxDepth) malformed("groups nested deeper than protobuf reads");
        open[depth++] = g.num;
      } else if (g.wt == kEndGroup && g.num != open[--depth]) {
        malformed("an end-group tag of another group");
      }
    }
    f.end = p;
  }
  return f;
}

// The wire types onnx.proto gives the fields read here, a bit each, by
// field number (repeated scalars: packed or not). A field of another wire
// type is an unknown field to protobuf (upb's decoder, and C++ protobuf's:
// kept, never read), as is a group: `reads` is false, and it is skipped.
constexpr uint8_t V = 1 << kVarint, F64 = 1 << kFixed64, L = 1 << kLen, F32 = 1 << kFixed32;
constexpr uint8_t kModelWire[8] = {0, 0, 0, 0, 0, 0, 0, L};  // graph
// the graph's node, initializer, input, output, value_info
constexpr uint8_t kGraphWire[14] = {0, L, 0, 0, 0, L, 0, 0, 0, 0, 0, L, L, L};
constexpr uint8_t kNodeWire[11] = {0, L, L, L, L, L, 0, L, L, L, L};
constexpr uint8_t kAttrWire[24] = {0, L, 0, 0, 0, L, L, F32 | L, V | L, 0, L, L, 0, 0, L, L, 0, 0, 0, 0, 0, L, L, L};
constexpr uint8_t kTensorWire[17] = {0, V | L, V, L, F32 | L, V | L, L, V | L, L, L, F64 | L, V | L, L, L, V, 0, L};
constexpr uint8_t kValueInfoWire[2] = {0, L};  // name

template <size_t N>
inline bool reads(const uint8_t (&wire)[N], const Field& f) {
  return f.num < N && ((wire[f.num] >> f.wt) & 1);
}

// Packed or unpacked repeated scalars (a field `reads` took): how many values it holds.
int64_t count_repeated(const Field& f, int scalar_wt) {
  if (f.wt != kLen) return 1;
  int64_t len = int64_t(f.v);
  if (scalar_wt == kFixed32) {
    if (len % 4) malformed("a packed fixed32 field's length is not a multiple of 4");
    return len / 4;
  }
  if (scalar_wt == kFixed64) {
    if (len % 8) malformed("a packed fixed64 field's length is not a multiple of 8");
    return len / 8;
  }
  int64_t n = 0;
  const uint8_t* q = f.val;
  while (q < f.end) {
    varint(q, f.end);
    ++n;
  }
  return n;
}

bool utf8_ok(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t k;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      k = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      k = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      k = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i <= k) return false;
    for (size_t j = 1; j <= k; ++j) {
      if ((s[i + j] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + j] & 0x3F);
    }
    if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000)) return false;  // overlong
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += k + 1;
  }
  return true;
}

inline uint64_t hash_bytes(const uint8_t* s, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, s + i, 8);
    h = (h ^ w) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
  }
  uint64_t w = 0;
  std::memcpy(&w, s + i, n - i);
  h = (h ^ w) * 0x165667B19E3779F9ull;
  h ^= h >> 32;
  return h;
}

// Every distinct string of each graph once, in first-seen order (id 0 is
// "", and each graph's first id is its ""; a scan of several graphs interns
// each apart, its hashes salted by the graph's index: a name means something
// only in its graph). The scan
// records where each string occurs (note); resolve() then interns them all
// in order, with the table slot of a string a few ahead prefetched: every
// probe of a big table is a cache miss, and so they overlap. Names are also
// mostly read right after they are written (a node's output is the next
// node's input): a small direct-mapped cache of recent strings answers those
// without the table.
class Strings {
 public:
  void start(size_t expected, const uint8_t* base) {
    base_ = base;
    size_t n = 1 << 12;
    while (n < 2 * expected && n < (size_t(1) << 30)) n <<= 1;
    slots_.assign(n, 0);
    hot_.assign(kHot, 0);
  }

  // A graph starts: its strings are interned apart from the previous graphs'.
  void begin() {
    cuts_.push_back(occ_pos_.size());
    empty_ = note(base_, 0);  // the graph's first string: ""
  }

  // The current graph's "" (what an absent string reads as).
  int32_t empty() const { return empty_; }

  // Where a string occurs; returns the occurrence's index.
  int32_t note(const uint8_t* s, size_t n) {
    if (occ_pos_.size() >= 0x7FFFFFF0u) unsupported("too many names");
    occ_pos_.push_back(uint32_t(s - base_));
    occ_len_.push_back(uint32_t(n));
    return int32_t(occ_pos_.size() - 1);
  }

  // The id of every occurrence.
  std::vector<int32_t> resolve() {
    size_t m = occ_pos_.size();
    std::vector<uint64_t> h(m);
    size_t g = 0;  // the graph of occurrence k
    for (size_t k = 0; k < m; ++k) {
      while (g + 1 < cuts_.size() && cuts_[g + 1] <= k) ++g;
      h[k] = salted(hash_bytes(base_ + occ_pos_[k], occ_len_[k]), g);
    }
    std::vector<int32_t> ids(m);
    constexpr size_t kAhead = 16;
    g = 0;
    for (size_t k = 0; k < m; ++k) {
      if (g < cuts_.size() && cuts_[g] == k) first_.push_back(int32_t(flags_.size())), ++g;
      if (k + kAhead < m) __builtin_prefetch(&slots_[size_t(h[k + kAhead]) & (slots_.size() - 1)]);
      ids[k] = intern(base_ + occ_pos_[k], occ_len_[k], h[k]);
    }
    first_.push_back(int32_t(flags_.size()));
    std::vector<uint32_t>().swap(occ_pos_);
    std::vector<uint32_t>().swap(occ_len_);
    std::vector<uint64_t>().swap(hashes_);
    base_ = nullptr;  // the caller's bytes may go away now
    return ids;
  }

  // The id of a string of graph g, or -1 (after resolve()).
  int32_t find(const uint8_t* s, size_t n, int64_t g) const {
    if (g < 0 || size_t(g) + 1 >= first_.size()) return -1;
    uint64_t h = salted(hash_bytes(s, n), size_t(g));
    uint64_t tag = (h >> 32) | 1;
    size_t mask = slots_.size() - 1;
    for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
      uint64_t slot = slots_[i];
      if (slot == 0) return -1;
      int32_t id = int32_t(uint32_t(slot));
      if ((slot >> 32) == tag && id >= first_[g] && id < first_[g + 1] && same(id, s, n)) return id;
    }
  }

  std::string blob_;
  std::vector<int32_t> off_{0};
  std::vector<int32_t> flags_;
  std::vector<int32_t> first_;  // each graph's first id, then the count

 private:
  static constexpr size_t kHot = 4096;

  static uint64_t salted(uint64_t h, size_t g) { return h ^ (uint64_t(g) * 0x9E3779B97F4A7C15ull); }

  int32_t intern(const uint8_t* s, size_t n, uint64_t h) {
    uint64_t tag = (h >> 32) | 1;  // never 0: a slot is (tag << 32 | id), 0 = empty
    uint64_t& hot = hot_[(h >> 20) & (kHot - 1)];
    int32_t lo = first_.back();  // the current graph's ids
    if ((hot >> 32) == tag && int32_t(uint32_t(hot)) >= lo && same(int32_t(uint32_t(hot)), s, n))
      return int32_t(uint32_t(hot));
    size_t mask = slots_.size() - 1;
    for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
      uint64_t slot = slots_[i];
      if (slot == 0) {
        int32_t id = add(s, n, h, i);
        hot = (tag << 32) | uint32_t(id);
        return id;
      }
      int32_t id = int32_t(uint32_t(slot));
      if ((slot >> 32) == tag && id >= lo && same(id, s, n)) {
        hot = slot;
        return id;
      }
    }
  }

  bool same(int32_t id, const uint8_t* s, size_t n) const {
    return size_t(off_[id + 1] - off_[id] - 1) == n && std::memcmp(blob_.data() + off_[id], s, n) == 0;
  }

  int32_t add(const uint8_t* s, size_t n, uint64_t h, size_t slot) {
    if (flags_.size() >= 0x7FFFFFF0u || blob_.size() + n + 1 > 0x7FFFFFF0u) unsupported("too many names");
    int32_t id = int32_t(flags_.size());
    blob_.append(reinterpret_cast<const char*>(s), n);
    blob_.push_back('\0');
    off_.push_back(int32_t(blob_.size()));
    flags_.push_back((utf8_ok(s, n) ? 0 : SF_BAD_UTF8) | (std::memchr(s, 0, n) ? SF_NUL : 0));
    hashes_.push_back(h);
    slots_[slot] = (((h >> 32) | 1) << 32) | uint32_t(id);
    if (flags_.size() * 2 > slots_.size()) grow();
    return id;
  }

  void grow() {
    std::vector<uint64_t> bigger(slots_.size() * 2, 0);
    size_t mask = bigger.size() - 1;
    for (size_t id = 0; id < hashes_.size(); ++id) {
      uint64_t h = hashes_[id];
      size_t i = size_t(h) & mask;
      while (bigger[i]) i = (i + 1) & mask;
      bigger[i] = (((h >> 32) | 1) << 32) | uint32_t(id);
    }
    slots_.swap(bigger);
  }

  const uint8_t* base_ = nullptr;
  std::vector<uint32_t> occ_pos_, occ_len_;
  std::vector<size_t> cuts_;  // each graph's first occurrence
  int32_t empty_ = 0;
  std::vector<uint64_t> slots_, hot_;
  std::vector<uint64_t> hashes_;
};

// Per-tensor columns (TensorProto facts), one row per tensor: the
// initializers ("init_*") and the attribute tensors ("at_*") alike.
struct TensorCols {
  std::vector<int32_t> dtype, dims_off{0}, flags, ext;
  // spans: int32 is enough (the file is under 2 GiB)
  std::vector<int32_t> start, end, raw_start, raw_len;
  std::vector<int64_t> dims, loc, typed;

  const std::vector<int32_t>* i32(const char* col) const {
    if (!std::strcmp(col, "dtype")) return &dtype;
    if (!std::strcmp(col, "dims_off")) return &dims_off;
    if (!std::strcmp(col, "flags")) return &flags;
    if (!std::strcmp(col, "ext")) return &ext;
    if (!std::strcmp(col, "start")) return &start;
    if (!std::strcmp(col, "end")) return &end;
    if (!std::strcmp(col, "raw_start")) return &raw_start;
    if (!std::strcmp(col, "raw_len")) return &raw_len;
    return nullptr;
  }
  const std::vector<int64_t>* i64(const char* col) const {
    if (!std::strcmp(col, "dims")) return &dims;
    if (!std::strcmp(col, "loc")) return &loc;
    if (!std::strcmp(col, "typed")) return &typed;
    return nullptr;
  }
};

}  // namespace

struct gos_result {
  int status = GOS_OK;
  std::string message;
  Strings strings;
  std::vector<int32_t> node_op, node_dom, node_name, node_flags, node_in_off, in_ids, node_out_off, out_ids, node_attr_off, attr_name, attr_flags, init_name, at_attr, input_name, output_name, vi_name, str_flags;
  // spans: int32 is enough (the file is under 2 GiB)
  std::vector<int32_t> node_start, node_end, attr_start, attr_end, vi_start, vi_end, str_off;
  std::vector<int64_t> model_info;
  // per graph of the scan, where its rows start (then their count): nodes, initializers, outputs, string ids
  std::vector<int32_t> graph_nodes, graph_inits, graph_outputs, graph_strs;
  TensorCols init, at;  // initializers; attribute tensors (one per at_attr entry)
};

namespace {

class Scanner {
 public:
  Scanner(gos_result& r, const uint8_t* base, size_t size) : r_(r), base_(base), size_(size), s_(r.strings) {
    // Room for what a file of this size typically holds; reserved, not
    // touched (the vectors still grow if a file holds more).
    size_t nodes = size / 16 + 16;
    // the string table starts small and doubles: sized from the file, a
    // weight-heavy one would zero-fill (and miss in) a table of bytes it never uses
    s_.start(std::min(size / 24 + 16, size_t(1) << 15), base);
    for (auto* v : {&r_.node_op, &r_.node_dom, &r_.node_name, &r_.node_flags, &r_.node_in_off, &r_.node_out_off,
                    &r_.node_attr_off, &r_.node_start, &r_.node_end, &r_.out_ids})
      v->reserve(nodes);
    r_.in_ids.reserve(2 * nodes);
    s_.blob_.reserve(size / 3);
    s_.off_.reserve(size / 12);
    s_.flags_.reserve(size / 12);
    r_.node_in_off.push_back(0);
    r_.node_out_off.push_back(0);
    r_.node_attr_off.push_back(0);
  }

  void model(const uint8_t* p, const uint8_t* end) {
    int graphs = 0;
    const uint8_t* gstart = nullptr;
    const uint8_t* gval = nullptr;
    const uint8_t* gend = nullptr;
    while (p < end) {
      Field f = next(p, end);
      if (reads(kModelWire, f)) {
        ++graphs;
        gstart = f.start;
        gval = f.val;
        gend = f.end;
      }
    }
    if (graphs != 1) unsupported("not exactly one graph field");
    graph(gval, gend);
    end_graphs();
    r_.model_info = {gstart - base_, gval - base_, gend - base_};
  }

  // Graphs, each serialized apart: [data + off[k], data + off[k + 1]).
  void graphs(const uint8_t* data, const int64_t* off, int64_t count) {
    for (int64_t k = 0; k < count; ++k) {
      if (off[k] < 0 || off[k + 1] < off[k] || uint64_t(off[k + 1]) > size_) malformed("a graph outside the data");
      graph(data + off[k], data + off[k + 1]);
    }
    end_graphs();
  }

  // Occurrence indices -> string ids, in every array that holds names.
  void resolve() {
    std::vector<int32_t> id = s_.resolve();
    r_.graph_strs = s_.first_;
    for (auto* v : {&r_.node_op, &r_.node_dom, &r_.node_name, &r_.in_ids, &r_.out_ids, &r_.attr_name,
                    &r_.init_name, &r_.input_name, &r_.output_name, &r_.vi_name})
      for (int32_t& x : *v) x = id[size_t(x)];
  }

 private:
  int32_t pos(const uint8_t* p) const { return int32_t(p - base_); }

  void end_graphs() {
    r_.graph_nodes.push_back(int32_t(r_.node_op.size()));
    r_.graph_inits.push_back(int32_t(r_.init_name.size()));
    r_.graph_outputs.push_back(int32_t(r_.output_name.size()));
  }

  int32_t str(const Field& f) { return s_.note(f.val, size_t(f.v)); }

  void graph(const uint8_t* p, const uint8_t* end) {
    s_.begin();
    r_.graph_nodes.push_back(int32_t(r_.node_op.size()));
    r_.graph_inits.push_back(int32_t(r_.init_name.size()));
    r_.graph_outputs.push_back(int32_t(r_.output_name.size()));
    while (p < end) {
      Field f = next(p, end);
      if (!reads(kGraphWire, f)) continue;
      switch (f.num) {
        case 1:
          node(f);
          break;
        case 5:
          r_.init_name.push_back(tensor(f, r_.init, true));
          break;
        case 11:
          r_.input_name.push_back(value_info(f, false));
          break;
        case 12:
          r_.output_name.push_back(value_info(f, false));
          break;
        case 13:
          r_.vi_name.push_back(value_info(f, true));
          break;
      }
    }
  }

  void node(const Field& nf) {
    int32_t op = s_.empty(), dom = op, name = op, flags = 0;
    const uint8_t* p = nf.val;
    while (p < nf.end) {
      Field f = next(p, nf.end);
      if (!reads(kNodeWire, f)) continue;
      switch (f.num) {
        case 1:
          r_.in_ids.push_back(str(f));
          break;
        case 2:
          r_.out_ids.push_back(str(f));
          break;
        case 3:
          name = str(f);
          break;
        case 4:
          op = str(f);
          break;
        case 7:
          dom = str(f);
          break;
        case 8:
          flags |= NF_OVERLOAD;
          break;
        case 5:
          flags |= attribute(f);
          break;
        case 9:
          flags |= NF_METADATA;
          break;
        case 10:
          flags |= NF_DEVICE;
          break;
      }
    }
    if (r_.in_ids.size() > 0x7FFFFFF0u || r_.out_ids.size() > 0x7FFFFFF0u || r_.attr_start.size() > 0x7FFFFFF0u)
      unsupported("too many names");
    r_.node_op.push_back(op);
    r_.node_dom.push_back(dom);
    r_.node_name.push_back(name);
    r_.node_flags.push_back(flags);
    r_.node_in_off.push_back(int32_t(r_.in_ids.size()));
    r_.node_out_off.push_back(int32_t(r_.out_ids.size()));
    r_.node_attr_off.push_back(int32_t(r_.attr_start.size()));
    r_.node_start.push_back(pos(nf.start));
    r_.node_end.push_back(pos(nf.end));
  }

  // An attribute's fields; its tensor, when its only tensor content is one
  // `t` field (a Constant's value), into the at_* columns (a `t` given twice
  // is merged by protobuf, `tensors` and sparse tensors are left to Python).
  int32_t attribute(const Field& af) {
    int32_t name = s_.empty(), flags = 0, ts = 0, others = 0;
    Field t{};
    const uint8_t* p = af.val;
    while (p < af.end) {
      Field f = next(p, af.end);
      if (!reads(kAttrWire, f)) continue;
      switch (f.num) {
        case 1:
          name = str(f);
          break;
        case 21:
          flags |= NF_REF;
          break;
        case 5:
          flags |= NF_TENSOR;
          t = f;
          ++ts;
          break;
        case 10:
        case 22:
        case 23:
          flags |= NF_TENSOR;
          ++others;
          break;
        case 6:
        case 11:
          flags |= NF_SUBGRAPH;
          break;
        case 14:
        case 15:
          flags |= NF_TYPEPROTO;
          break;
        case 7:
          count_repeated(f, kFixed32);  // (a packed length protobuf refuses: MALFORMED)
          break;
        case 8:
          count_repeated(f, kVarint);
          break;
      }
    }
    if (ts == 1 && !others) {
      tensor(t, r_.at, false);
      r_.at_attr.push_back(int32_t(r_.attr_start.size()));
    }
    r_.attr_name.push_back(name);
    r_.attr_flags.push_back(flags);
    r_.attr_start.push_back(pos(af.start));
    r_.attr_end.push_back(pos(af.end));
    return flags;
  }

  // A TensorProto field into one row of ``c``; returns its name's occurrence
  // (``named``: else the name is not noted, an attribute tensor's name being
  // no name of the graph).
  int32_t tensor(const Field& tf, TensorCols& c, bool named) {
    int32_t name = s_.empty(), flags = 0, ext = 0;
    int64_t dtype = 0, loc = 0;
    int32_t raw_start = -1, raw_len = -1;
    int64_t typed[6] = {0, 0, 0, 0, 0, 0};
    auto& dims = c.dims;
    const uint8_t* p = tf.val;
    while (p < tf.end) {
      Field f = next(p, tf.end);
      if (!reads(kTensorWire, f)) continue;
      switch (f.num) {
        case 1:
          if (f.wt == kVarint) {
            dims.push_back(int64_t(f.v));
          } else {
            const uint8_t* q = f.val;
            while (q < f.end) dims.push_back(int64_t(varint(q, f.end)));
          }
          break;
        case 2:
          dtype = int64_t(int32_t(uint32_t(f.v)));  // int32 field: protobuf truncates
          break;
        case 3:
          flags |= IF_SEGMENT;
          break;
        case 4:
          typed[0] += count_repeated(f, kFixed32);
          break;
        case 5:
          typed[1] += count_repeated(f, kVarint);
          break;
        case 6:
          typed[2] += 1;
          break;
        case 7:
          typed[3] += count_repeated(f, kVarint);
          break;
        case 10:
          typed[4] += count_repeated(f, kFixed64);
          break;
        case 11:
          typed[5] += count_repeated(f, kVarint);
          break;
        case 8:
          if (named) name = str(f);
          break;
        case 9:
          if (flags & IF_RAW) flags |= IF_RAW_TWICE;
          flags |= IF_RAW;
          raw_start = pos(f.val);
          raw_len = int32_t(f.v);
          break;
        case 12:
          flags |= IF_DOC;
          break;
        case 13:
          ++ext;
          break;
        case 14:
          // a closed enum (DEFAULT, EXTERNAL) of 32 bits: protobuf keeps any other value as an unknown field
          if (uint32_t(f.v) <= 1) loc = int64_t(uint32_t(f.v));
          break;
        case 16:
          flags |= IF_METADATA;
          break;
      }
    }
    if (dims.size() > 0x7FFFFFF0u || c.dtype.size() > 0x7FFFFFF0u) unsupported("too many dims");
    c.dtype.push_back(int32_t(dtype));
    c.dims_off.push_back(int32_t(dims.size()));
    c.flags.push_back(flags);
    c.ext.push_back(ext);
    c.start.push_back(pos(tf.start));
    c.end.push_back(pos(tf.end));
    c.loc.push_back(loc);
    c.raw_start.push_back(raw_start);
    c.raw_len.push_back(raw_len);
    c.typed.insert(c.typed.end(), typed, typed + 6);
    return name;
  }

  int32_t value_info(const Field& vf, bool spans) {
    int32_t name = s_.empty();
    const uint8_t* p = vf.val;
    while (p < vf.end) {
      Field f = next(p, vf.end);
      if (reads(kValueInfoWire, f)) name = str(f);
    }
    if (spans) {
      r_.vi_start.push_back(pos(vf.start));
      r_.vi_end.push_back(pos(vf.end));
    }
    return name;
  }

  gos_result& r_;
  const uint8_t* base_;
  size_t size_;
  Strings& s_;
};

}  // namespace

namespace {
template <class T>
int64_t expose(const std::vector<T>& v, const T** out) {
  *out = v.empty() ? nullptr : v.data();
  return int64_t(v.size());
}

// The column of r->init ("init_...") or r->at ("at_..."), else null.
template <class T>
const std::vector<T>* tensor_col(const gos_result* r, const char* name) {
  const TensorCols* c = nullptr;
  if (!std::strncmp(name, "init_", 5)) {
    c = &r->init;
    name += 5;
  } else if (!std::strncmp(name, "at_", 3)) {
    c = &r->at;
    name += 3;
  } else {
    return nullptr;
  }
  if constexpr (sizeof(T) == 4) return c->i32(name);
  else return c->i64(name);
}

// A scan of [data, data + size): a model (count < 0) or count graphs (gos_scan_graphs).
gos_result* run(const uint8_t* data, size_t size, const int64_t* off, int64_t count) {
  gos_result* r = new (std::nothrow) gos_result();
  if (r == nullptr) return nullptr;
  try {
    if (data == nullptr && size) malformed("no data");
    if (size > 0x7FFFFFFFu) unsupported("over 2 GiB");
    Scanner sc(*r, data, size);
    if (count < 0) sc.model(data, data + size);
    else sc.graphs(data, off, count);
    sc.resolve();
  } catch (const Stop& s) {
    r->status = s.status;
    r->message = s.why;
  } catch (const std::bad_alloc&) {
    r->status = GOS_UNSUPPORTED;
    r->message = "out of memory";
  }
  r->str_off = r->strings.off_;
  r->str_flags = r->strings.flags_;
  return r;
}
}  // namespace

extern "C" {

gos_result* gos_scan(const uint8_t* data, size_t size) { return run(data, size, nullptr, -1); }

gos_result* gos_scan_graphs(const uint8_t* data, size_t size, const int64_t* off, int64_t count) {
  return run(data, size, off, count);
}

int gos_status(const gos_result* r) { return r->status; }

const char* gos_message(const gos_result* r) { return r->message.c_str(); }

int64_t gos_i32(const gos_result* r, const char* name, const int32_t** out) {
  if (const auto* col = tensor_col<int32_t>(r, name)) return expose(*col, out);
  if (!std::strcmp(name, "node_op")) return expose(r->node_op, out);
  if (!std::strcmp(name, "node_dom")) return expose(r->node_dom, out);
  if (!std::strcmp(name, "node_name")) return expose(r->node_name, out);
  if (!std::strcmp(name, "node_flags")) return expose(r->node_flags, out);
  if (!std::strcmp(name, "node_in_off")) return expose(r->node_in_off, out);
  if (!std::strcmp(name, "in_ids")) return expose(r->in_ids, out);
  if (!std::strcmp(name, "node_out_off")) return expose(r->node_out_off, out);
  if (!std::strcmp(name, "out_ids")) return expose(r->out_ids, out);
  if (!std::strcmp(name, "node_attr_off")) return expose(r->node_attr_off, out);
  if (!std::strcmp(name, "attr_name")) return expose(r->attr_name, out);
  if (!std::strcmp(name, "attr_flags")) return expose(r->attr_flags, out);
  if (!std::strcmp(name, "init_name")) return expose(r->init_name, out);
  if (!std::strcmp(name, "at_attr")) return expose(r->at_attr, out);
  if (!std::strcmp(name, "input_name")) return expose(r->input_name, out);
  if (!std::strcmp(name, "output_name")) return expose(r->output_name, out);
  if (!std::strcmp(name, "vi_name")) return expose(r->vi_name, out);
  if (!std::strcmp(name, "str_flags")) return expose(r->str_flags, out);
  if (!std::strcmp(name, "node_start")) return expose(r->node_start, out);
  if (!std::strcmp(name, "node_end")) return expose(r->node_end, out);
  if (!std::strcmp(name, "attr_start")) return expose(r->attr_start, out);
  if (!std::strcmp(name, "attr_end")) return expose(r->attr_end, out);
  if (!std::strcmp(name, "vi_start")) return expose(r->vi_start, out);
  if (!std::strcmp(name, "vi_end")) return expose(r->vi_end, out);
  if (!std::strcmp(name, "str_off")) return expose(r->str_off, out);
  if (!std::strcmp(name, "graph_nodes")) return expose(r->graph_nodes, out);
  if (!std::strcmp(name, "graph_inits")) return expose(r->graph_inits, out);
  if (!std::strcmp(name, "graph_outputs")) return expose(r->graph_outputs, out);
  if (!std::strcmp(name, "graph_strs")) return expose(r->graph_strs, out);
  return -1;
}

int64_t gos_i64(const gos_result* r, const char* name, const int64_t** out) {
  if (const auto* col = tensor_col<int64_t>(r, name)) return expose(*col, out);
  if (!std::strcmp(name, "model_info")) return expose(r->model_info, out);
  return -1;
}

int64_t gos_blob(const gos_result* r, const char** out) {
  *out = r->strings.blob_.data();
  return int64_t(r->strings.blob_.size());
}

int64_t gos_find(const gos_result* r, int64_t graph, const char* s, int64_t n) {
  if (r->status != GOS_OK || n < 0) return -1;
  return r->strings.find(reinterpret_cast<const uint8_t*>(s), size_t(n), graph);
}

int64_t gos_find_many(const gos_result* r, int64_t graph, const char* blob, const int64_t* off, int64_t count,
                      int32_t* out) {
  if (r->status != GOS_OK) return -1;
  for (int64_t k = 0; k < count; ++k) {
    if (off[k + 1] < off[k]) return -1;
    out[k] = r->strings.find(reinterpret_cast<const uint8_t*>(blob + off[k]), size_t(off[k + 1] - off[k]), graph);
  }
  return count;
}

void gos_free(gos_result* r) { delete r; }

int32_t gos_version(void) { return kVersion; }

}  // extern "C"
