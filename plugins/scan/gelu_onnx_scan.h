/* gelu-onnx: a one-pass reader of a serialized ONNX ModelProto's main graph.
 *
 * gos_scan() walks the protobuf wire format of the file's bytes once and
 * returns flat arrays: per top-level node its byte span, op type, domain,
 * name, input and output names (CSR), its attribute fields (spans and
 * flags); per initializer its span, name, element type, dims, storage
 * facts, and the same facts of each attribute tensor (an attribute's one
 * `t` field: a Constant's value); the graph's input / output / value_info
 * names; one table of every string, interned. It never trusts a length: every read is bounded by the
 * enclosing message, and a malformed file is a status, never a crash.
 *
 * It is not a parser of record: Python parses the same bytes with protobuf
 * too. The arrays describe what protobuf parsed: fields protobuf keeps as
 * unknown (a known field with another wire type, groups, a value outside a
 * closed enum) are skipped; what it would merge (the graph field twice) is
 * GOS_UNSUPPORTED, and the caller scans protobuf's own serialization.
 * No CPython API, no dependencies (loaded with ctypes).
 */
#ifndef GELU_ONNX_SCAN_H
#define GELU_ONNX_SCAN_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define GOS_API __attribute__((visibility("default")))
#else
#define GOS_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum {
  GOS_OK = 0,
  GOS_MALFORMED = 1,   /* not well-formed protobuf (protobuf refuses it too) */
  GOS_UNSUPPORTED = 2  /* valid, or maybe valid, but not mapped here */
};

typedef struct gos_result gos_result;

/* Scan size bytes at data; always returns a handle (NULL only when out of memory). */
GOS_API gos_result* gos_scan(const uint8_t* data, size_t size);
/* Scan count GraphProtos, graph k serialized at data[off[k]..off[k+1]), into one
 * result: their rows one after another (graph_nodes, graph_inits, graph_outputs
 * say where each graph's start), each graph's strings interned apart (graph_strs:
 * its first id, its ""), as gos_scan does. */
GOS_API gos_result* gos_scan_graphs(const uint8_t* data, size_t size, const int64_t* off, int64_t count);
GOS_API int gos_status(const gos_result* r);
/* Why the status is not GOS_OK (a short English phrase), else "". */
GOS_API const char* gos_message(const gos_result* r);
/* An int32 / int64 array by name: its length, *out set to its first element
 * (NULL for an empty array); -1 for an unknown name. Valid until gos_free. */
GOS_API int64_t gos_i32(const gos_result* r, const char* name, const int32_t** out);
GOS_API int64_t gos_i64(const gos_result* r, const char* name, const int64_t** out);
/* The string table: every distinct string, each followed by a NUL byte. */
GOS_API int64_t gos_blob(const gos_result* r, const char** out);
/* The id of the string s[0..n) of graph ``graph`` (0: the model's), or -1 when it has no such string. */
GOS_API int64_t gos_find(const gos_result* r, int64_t graph, const char* s, int64_t n);
/* gos_find for count strings: string k is blob[off[k]..off[k+1]); ids to out. */
GOS_API int64_t gos_find_many(const gos_result* r, int64_t graph, const char* blob, const int64_t* off, int64_t count,
                              int32_t* out);
GOS_API void gos_free(gos_result* r);
/* The ABI version of this library (the Python side checks it). */
GOS_API int32_t gos_version(void);

#ifdef __cplusplus
}
#endif

#endif
