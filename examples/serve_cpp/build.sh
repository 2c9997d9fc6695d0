#!/bin/sh
# Build the serve example against an installed onnxruntime:
#   ORT_INCLUDE=<folder holding onnxruntime_cxx_api.h> ORT_LIB=<libonnxruntime.so.1.x> ./build.sh OUT_DIR
# The Python wheel's library works (onnxruntime/capi/libonnxruntime.so.1.*);
# it is linked by its soname, which OUT_DIR gets as a link beside the binary.
set -eu
out=${1:-.}
mkdir -p "$out"
soname=$(objdump -p "$ORT_LIB" | awk '/SONAME/ {print $2}')
ln -sf "$(realpath "$ORT_LIB")" "$out/$soname"
g++ -std=c++17 -O2 -Wall -I"$ORT_INCLUDE" "$(dirname "$0")/serve.cpp" -o "$out/serve" \
    "$out/$soname" -Wl,-rpath,'$ORIGIN'
