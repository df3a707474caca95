#ifndef TRIBUTARY_CZSTD_SHIM_H
#define TRIBUTARY_CZSTD_SHIM_H
// ZSTD_getFrameHeader lives in the "experimental" section of zstd.h. Debian's libzstd exports it
// (checked with nm), and the decoder needs it to read a frame's window size before decoding.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#endif
