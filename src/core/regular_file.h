// Reading a small input file (a config, a hostfile) safely: only a regular file is read, and only
// up to a stated size, so /dev/zero, a FIFO or a directory given by mistake (or by a hostile user)
// is refused with a message instead of exhausting memory or blocking forever.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace zero {

// Reads the whole of `path`. Refuses (kInvalidArgument, message naming the path) a FIFO, socket,
// character or block device, directory or anything else that is not a regular file, and a file
// larger than `max_bytes` (the message names the limit; `what` says what the file is for, e.g.
// "a DeepSpeed config"). Never blocks on a FIFO: the file is opened with O_NONBLOCK and checked
// with fstat before any read. Errors: kNotFound when the path does not exist, kIoError (with the
// errno text) when it cannot be opened or read.
StatusOr<std::string> read_regular_file(const std::string& path, uint64_t max_bytes,
                                        std::string_view what);

// "a directory", "a FIFO (named pipe)", "a character device", ... for a stat st_mode that is not a
// regular file (messages: "PATH: is a FIFO (named pipe), not a regular file").
const char* file_type_name(uint32_t st_mode);

// "64 MiB", "512 KiB", "100 bytes": a byte count for messages.
std::string format_byte_limit(uint64_t bytes);

}  // namespace zero
