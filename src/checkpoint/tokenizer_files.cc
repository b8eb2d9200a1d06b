// See tokenizer_files.h.
#include "checkpoint/tokenizer_files.h"

#include <filesystem>

namespace zero::checkpoint {

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {"tokenizer.json", "tokenizer_config.json",
                                                 "special_tokens_map.json", "tokenizer.model"};
  return names;
}

std::string run_tokenizer_dir(const std::string& output_dir) { return output_dir + "/tokenizer"; }

Status copy_tokenizer_files(Storage& storage, const std::string& from_dir,
                            const std::string& to_dir, std::vector<std::string>* copied) {
  std::error_code ec;
  if (!std::filesystem::is_directory(from_dir, ec)) return ok_status();
  bool made_dir = false;
  for (const std::string& name : tokenizer_file_names()) {
    const std::string src = from_dir + "/" + name;
    if (!storage.file_exists(src)) continue;
    if (!made_dir) {
      ZERO_RETURN_IF_ERROR(storage.make_dirs(to_dir));
      made_dir = true;
    }
    ZERO_ASSIGN_OR_RETURN(auto in, storage.open_read(src));
    std::string bytes(in->size(), '\0');
    if (!bytes.empty()) ZERO_RETURN_IF_ERROR(in->read_at(0, bytes.size(), bytes.data()));
    const std::string dst = to_dir + "/" + name, tmp = dst + ".tmp";
    {
      ZERO_ASSIGN_OR_RETURN(auto out, storage.open_write(tmp));
      ZERO_RETURN_IF_ERROR(out->append(bytes.data(), bytes.size()));
      ZERO_RETURN_IF_ERROR(out->close());
    }
    ZERO_RETURN_IF_ERROR(storage.rename(tmp, dst));
    if (copied) copied->push_back(name);
  }
  if (!made_dir) return ok_status();
  for (const std::string& name : tokenizer_file_names()) {
    const std::string dst = to_dir + "/" + name;
    if (!storage.file_exists(from_dir + "/" + name) && storage.file_exists(dst)) {
      ZERO_RETURN_IF_ERROR(storage.remove_file(dst));
    }
  }
  return ok_status();
}

}  // namespace zero::checkpoint
