// The torch.save reader against hand-built bytes: a well-formed archive reads (values, strides,
// offsets), and hostile ones are refused with a clear error: unknown globals, REDUCE of os.system /
// builtins.eval, tensors past their storage, storages that lie about their size, truncated zips,
// zip bombs (declared sizes past the file, overlapping members), path traversal, compression,
// encryption, duplicate names. Nothing is executed; an import from a hostile file writes nothing.
#include "checkpoint/torch_archive.h"

#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "checkpoint/deepspeed_import.h"
#include "checkpoint/deepspeed_state.h"
#include "model/model_config.h"

namespace zero::checkpoint {
namespace {

namespace fs = std::filesystem;

// Imports the DeepSpeed directory `dir` into dir/out for the gpt2-tiny fixture model (a refusal
// must leave dir/out uncreated).
StatusOr<DeepSpeedImportResult> import_for_tiny_model(const fs::path& dir) {
  auto config = model::load_model_config(std::string(ZERO_SOURCE_DIR) +
                                         "/tests/fixtures/checkpoint/deepspeed/"
                                         "gpt2_tiny_stage2_w1/config.json");
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  if (!config.ok()) return config.status();
  return import_deepspeed_checkpoint(*default_storage(), {dir.string(), "", (dir / "out").string()},
                                     *config);
}

// ---- byte builders ----------------------------------------------------------------------------

void put16(std::string& s, uint32_t v) { s += char(v & 0xff), s += char((v >> 8) & 0xff); }
void put32(std::string& s, uint32_t v) { put16(s, v & 0xffff), put16(s, v >> 16); }

struct Member {
  std::string name;
  std::string data;
  uint16_t method = 0;
  uint16_t flags = 0;
  int64_t declared_size = -1;  // central directory size field (-1: the real size)
};

// A zip of stored members as torch.save writes them (local headers, central directory, end).
std::string make_zip(const std::vector<Member>& members) {
  std::string out, cd;
  for (const Member& m : members) {
    const uint32_t offset = static_cast<uint32_t>(out.size());
    const uint32_t crc = crc32_update(0, m.data.data(), m.data.size());
    const uint32_t size = m.declared_size >= 0 ? static_cast<uint32_t>(m.declared_size)
                                               : static_cast<uint32_t>(m.data.size());
    put32(out, 0x04034b50), put16(out, 20), put16(out, m.flags), put16(out, m.method);
    put32(out, 0), put32(out, crc), put32(out, size), put32(out, size);
    put16(out, static_cast<uint32_t>(m.name.size())), put16(out, 0);
    out += m.name + m.data;
    put32(cd, 0x02014b50), put16(cd, 20), put16(cd, 20), put16(cd, m.flags), put16(cd, m.method);
    put32(cd, 0), put32(cd, crc), put32(cd, size), put32(cd, size);
    put16(cd, static_cast<uint32_t>(m.name.size())), put16(cd, 0), put16(cd, 0), put16(cd, 0);
    put16(cd, 0), put32(cd, 0), put32(cd, offset);
    cd += m.name;
  }
  const uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out += cd;
  put32(out, 0x06054b50), put16(out, 0), put16(out, 0);
  put16(out, static_cast<uint32_t>(members.size())),
      put16(out, static_cast<uint32_t>(members.size()));
  put32(out, static_cast<uint32_t>(cd.size())), put32(out, cd_offset), put16(out, 0);
  return out;
}

// Pickle opcodes.
std::string str(const std::string& s) {
  std::string o = "X";
  put32(o, static_cast<uint32_t>(s.size()));
  return o + s;
}
std::string num(int32_t v) {
  std::string o = "J";
  put32(o, static_cast<uint32_t>(v));
  return o;
}
std::string global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}

// {'w': tensor of `shape` / `stride` at `offset` over a FloatStorage '0' of `numel` elements}.
std::string tensor_pickle(int numel, int offset, std::vector<int> shape, std::vector<int> stride) {
  std::string p = "\x80\x02}";
  p += str("w") + global("torch._utils", "_rebuild_tensor_v2") + "(";
  p += "(" + str("storage") + global("torch", "FloatStorage") + str("0") + str("cpu") + num(numel) +
       "tQ";
  p += num(offset) + "(";
  for (int d : shape) p += num(d);
  p += "t(";
  for (int d : stride) p += num(d);
  p += "t\x89" + global("collections", "OrderedDict") + ")R" + "tR" + "s.";
  return p;
}

std::string floats(int n) {
  std::string s(static_cast<size_t>(n) * 4, '\0');
  for (int i = 0; i < n; ++i) {
    const float f = static_cast<float>(i) + 0.5f;
    std::memcpy(s.data() + 4 * i, &f, 4);
  }
  return s;
}

StatusOr<std::unique_ptr<TorchArchive>> open_bytes(std::string bytes) {
  // memory_file reads the bytes in place without owning them, and an archive reads tensor data
  // after open: every test archive's bytes are kept for the test binary's lifetime.
  static std::deque<std::string> kept;
  kept.push_back(std::move(bytes));
  return TorchArchive::from_file(memory_file(kept.back(), "test.pt"));
}

std::string archive(const std::string& pickle, const std::string& storage) {
  return make_zip(
      {{"archive/data.pkl", pickle}, {"archive/byteorder", "little"}, {"archive/data/0", storage}});
}

void expect_refused(const StatusOr<std::unique_ptr<TorchArchive>>& a, const std::string& needle) {
  ASSERT_FALSE(a.ok()) << "expected a refusal mentioning " << needle;
  EXPECT_NE(a.status().to_string().find(needle), std::string::npos) << a.status().to_string();
}

// ---- well-formed ------------------------------------------------------------------------------

TEST(TorchArchive, ReadsAStridedTensorAtAnOffset) {
  // storage 0.5, 1.5, ..., 7.5; view offset 1, shape (2, 3), stride (1, 2): a transposed read.
  auto a = open_bytes(archive(tensor_pickle(8, 1, {2, 3}, {1, 2}), floats(8)));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  const PyValue* w = (*a)->root().get("w");
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->kind, PyKind::kTensor);
  std::vector<float> out;
  ASSERT_TRUE((*a)->read_f32(w->tensor, out, "w").ok());
  EXPECT_EQ(out, (std::vector<float>{1.5f, 3.5f, 5.5f, 2.5f, 4.5f, 6.5f}));
}

TEST(TorchArchive, ReadsWhatTorchSaveWrote) {
  // tests/fixtures/fuzz/torch_archive/small.pt, written by torch 1.13's torch.save:
  // {'w': arange(6.).reshape(2, 3).t(), 'b': ones(2, bfloat16), 'n': 3, 's': 'x',
  //  'od': OrderedDict(a=1.5)}
  auto a =
      TorchArchive::open(*default_storage(), std::string(ZERO_SOURCE_DIR) +
                                                 "/tests/fixtures/fuzz/torch_archive/small.pt");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  const PyValue& root = (*a)->root();
  std::vector<float> out;
  ASSERT_TRUE((*a)->read_f32(root.get("w")->tensor, out, "w").ok());
  EXPECT_EQ(out, (std::vector<float>{0, 3, 1, 4, 2, 5}));
  ASSERT_TRUE((*a)->read_f32(root.get("b")->tensor, out, "b").ok());
  EXPECT_EQ(root.get("b")->tensor.storage->dtype, TorchDType::kBF16);
  EXPECT_EQ(out, (std::vector<float>{1, 1}));
  EXPECT_EQ(root.get("n")->i, 3);
  EXPECT_EQ(root.get("s")->s, "x");
  EXPECT_DOUBLE_EQ(root.get("od")->get("a")->f, 1.5);
}

// ---- hostile pickles --------------------------------------------------------------------------

TEST(TorchArchiveHostile, ReduceOfOsSystemIsRefusedByName) {
  const std::string p = "\x80\x02" + global("os", "system") + str("touch /tmp/pwned") + "\x85R.";
  expect_refused(open_bytes(archive(p, "")), "'os.system'");
}

TEST(TorchArchiveHostile, BuiltinsEvalThroughStackGlobalIsRefused) {
  const std::string p = "\x80\x04" + str("builtins") + str("eval") + "\x93" + str("1+1") + "\x85R.";
  expect_refused(open_bytes(archive(p, "")), "'builtins.eval'");
}

TEST(TorchArchiveHostile, UnknownGlobalIsRefusedEvenIfNeverCalled) {
  const std::string p = "\x80\x02" + global("numpy.core.multiarray", "_reconstruct") + ".";
  expect_refused(open_bytes(archive(p, "")), "'numpy.core.multiarray._reconstruct'");
}

TEST(TorchArchiveHostile, CallingAnAllowedNonFunctionIsRefused) {
  // A storage type is allowed as a persistent-id tag, never as something to call.
  const std::string p = "\x80\x02" + global("torch", "FloatStorage") + ")R.";
  expect_refused(open_bytes(archive(p, "")), "cannot be called");
  const std::string g = "\x80\x02" + global("__builtin__", "getattr") +
                        global("torch", "FloatStorage") + str("__init__") + "\x86R.";
  expect_refused(open_bytes(archive(g, "")), "getattr");
}

TEST(TorchArchiveHostile, UnknownOpcodeIsRefused) {
  expect_refused(open_bytes(archive("\x80\x02I1\n.", "")), "opcode 0x49");  // INT (text)
}

TEST(TorchArchiveHostile, TensorPastItsStorageIsRefused) {
  expect_refused(open_bytes(archive(tensor_pickle(8, 3, {2, 3}, {3, 1}), floats(8))),
                 "reaches past its storage");
  expect_refused(open_bytes(archive(tensor_pickle(8, 0, {2, 3}, {-1, 1}), floats(8))),
                 "non-negative");
  expect_refused(
      open_bytes(archive(tensor_pickle(8, 0, {1 << 30, 1 << 30}, {1 << 30, 1}), floats(8))),
      "storage");
}

TEST(TorchArchiveHostile, StorageLargerThanItsMemberIsRefused) {
  // The pickle claims 1e9 floats; the member holds 8.
  expect_refused(open_bytes(archive(tensor_pickle(1000000000, 0, {2}, {1}), floats(8))),
                 "declares 1000000000 float32 elements but its member holds 32 bytes");
  expect_refused(open_bytes(make_zip({{"archive/data.pkl", tensor_pickle(8, 0, {2}, {1})}})),
                 "has no member data/0");
}

TEST(TorchArchiveHostile, TruncatedStreamsAreRefusedAtEveryLength) {
  const std::string p = tensor_pickle(8, 1, {2, 3}, {1, 2});
  for (size_t n = 0; n + 1 < p.size(); ++n) {
    auto a = open_bytes(archive(p.substr(0, n), floats(8)));
    EXPECT_FALSE(a.ok()) << "pickle cut at " << n;
  }
  const std::string zip = archive(p, floats(8));
  for (size_t n = 0; n < zip.size(); ++n) {
    auto a = open_bytes(zip.substr(0, n));
    EXPECT_FALSE(a.ok()) << "zip cut at " << n;
  }
}

TEST(TorchArchiveHostile, CopyingALongListAgainAndAgainStopsAtTheBudget) {
  // A 1000-element list copied 100 times by torch.Size: 100k element copies from ~1 KB of pickle.
  std::string p = std::string("\x80\x02]q\0(", 6);  // memo 0 = the list
  for (int i = 0; i < 1000; ++i) p += "K\x01";
  p += "e";
  for (int i = 0; i < 100; ++i) p += global("torch", "Size") + std::string("h\0\x85R0", 5);
  p += ".";
  UnpickleLimits limits;
  limits.max_values = 50'000;
  auto u = unpickle(p, "copies.pkl", limits);
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().to_string().find("elements copied"), std::string::npos)
      << u.status().to_string();
  limits.max_values = 200'000;
  EXPECT_TRUE(unpickle(p, "copies.pkl", limits).ok());
}

TEST(TorchArchiveHostile, RepeatedKeysReplaceAsInPython) {
  // {'a': 1, 'a': 2} (SETITEMS) reads as {'a': 2} with one item.
  const std::string p = "\x80\x02}(" + str("a") + "K\x01" + str("a") + "K\x02u.";
  auto u = unpickle(p, "dup.pkl");
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_EQ(u->root().dict.size(), 1u);
  EXPECT_EQ(u->root().get("a")->i, 2);
}

// ---- hostile zips -----------------------------------------------------------------------------

TEST(TorchArchiveHostile, ZipBombDeclaredSizesPastTheFileAreRefused) {
  std::vector<Member> m = {{"archive/data.pkl", "\x80\x02N."}, {"archive/data/0", floats(8)}};
  m[1].declared_size = 0x7fffffff;
  expect_refused(open_bytes(make_zip(m)), "runs past the data area");
}

TEST(TorchArchiveHostile, OverlappingMembersAreRefused) {
  // Member 0's declared size covers member 1's header and data.
  std::vector<Member> m = {{"archive/data.pkl", "\x80\x02N."}, {"archive/data/0", floats(8)}};
  std::string zip = make_zip(m);
  const uint32_t grow = 30 + 14 + 32;
  // Patch the central size fields of member 0 (offset 20 / 24 of its central header).
  const size_t cd = zip.find(std::string("PK\x01\x02", 4));
  uint32_t size = 4 + grow;
  std::memcpy(zip.data() + cd + 20, &size, 4);
  std::memcpy(zip.data() + cd + 24, &size, 4);
  expect_refused(open_bytes(zip), "overlap");
}

TEST(TorchArchiveHostile, PathTraversalNamesAreRefused) {
  for (const std::string name : {"../evil", "/etc/passwd", "archive/../../x", "archive//x",
                                 "archive\\..\\x", "archive/./x"}) {
    auto a = open_bytes(make_zip({{"archive/data.pkl", "\x80\x02N."}, {name, "x"}}));
    expect_refused(a, "refusing member name");
  }
}

TEST(TorchArchiveHostile, CompressedEncryptedAndDuplicateMembersAreRefused) {
  Member deflated{"archive/data.pkl", "\x80\x02N.", 8};
  expect_refused(open_bytes(make_zip({deflated})), "compressed (method 8)");
  Member encrypted{"archive/data.pkl", "\x80\x02N.", 0, 1};
  expect_refused(open_bytes(make_zip({encrypted})), "encrypted");
  expect_refused(open_bytes(make_zip(
                     {{"archive/data.pkl", "\x80\x02N."}, {"archive/data.pkl", "\x80\x02N."}})),
                 "appears twice");
}

TEST(TorchArchiveHostile, CorruptedPickleBytesFailTheirCrc) {
  std::string zip = archive(tensor_pickle(8, 0, {2}, {1}), floats(8));
  zip[30 + 16 + 4] ^= 0x01;  // inside data.pkl's bytes (after its 30-byte header and name)
  expect_refused(open_bytes(zip), "CRC-32");
}

TEST(TorchArchiveHostile, ImportFromAHostileModelStateFileWritesNothing) {
  const fs::path dir = fs::path(::testing::TempDir()) / "ds_hostile";
  fs::remove_all(dir);
  fs::create_directories(dir / "global_step1");
  std::ofstream(dir / "latest") << "global_step1\n";
  const std::string marker = (dir / "pwned").string();
  const std::string p = "\x80\x02" + global("os", "system") + str("touch " + marker) + "\x85R.";
  std::ofstream(dir / "global_step1" / "mp_rank_00_model_states.pt", std::ios::binary)
      << archive(p, "");
  std::ofstream(dir / "global_step1" / "zero_pp_rank_0_mp_rank_00_optim_states.pt") << "x";
  const std::string out = (dir / "out").string();
  auto r = import_for_tiny_model(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("os.system"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(marker));
}

}  // namespace
}  // namespace zero::checkpoint

namespace zero::checkpoint {
namespace {

// A DeepSpeed model-state file whose ds_config names `optimizer_type` (hand-built pickle: only the
// keys the import reads before any rank file).
void write_model_states(const fs::path& tag_dir, const std::string& optimizer_type,
                        int32_t rows = 67) {
  fs::create_directories(tag_dir);
  std::ofstream(tag_dir.parent_path() / "latest") << tag_dir.filename().string() << "\n";
  std::string p = "\x80\x02}" + str("param_shapes") + "]" + global("collections", "OrderedDict") +
                  ")R" + str("transformer.wte.weight") + "(" + num(rows) + num(6) + "tsas";
  p += str("dp_world_size") + num(1) + "s";
  p += str("ds_config") + "}" + str("optimizer") + "}" + str("type") + str(optimizer_type) + "sss.";
  std::ofstream(tag_dir / "mp_rank_00_model_states.pt", std::ios::binary) << archive(p, "");
  std::ofstream(tag_dir / "zero_pp_rank_0_mp_rank_00_optim_states.pt") << "x";
}

TEST(DeepSpeedImportRefusal, AnotherOptimizerIsNamedBeforeAnythingIsWritten) {
  const fs::path dir = fs::path(::testing::TempDir()) / "ds_lamb";
  fs::remove_all(dir);
  write_model_states(dir / "global_step1", "Lamb");
  const std::string out = (dir / "out").string();
  auto r = import_for_tiny_model(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().to_string().find("optimizer 'Lamb'; only Adam / AdamW"), std::string::npos)
      << r.status().to_string();
  EXPECT_FALSE(fs::exists(out));
}

TEST(DeepSpeedImportRefusal, AClientOptimizerIsRefused) {
  const fs::path dir = fs::path(::testing::TempDir()) / "ds_client_opt";
  fs::remove_all(dir);
  write_model_states(dir / "global_step1", "");
  auto st = read_deepspeed_state(*default_storage(), dir.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().to_string().find("names no optimizer"), std::string::npos)
      << st.status().to_string();
}

// param_shapes claiming 2^31 x 6 elements against a 1-byte optimizer file: refused from the files'
// sizes before the parameters' tensors are allocated (tens of GiB otherwise).
TEST(DeepSpeedImportRefusal, ParamShapesLargerThanTheFilesAreRefusedBeforeAllocating) {
  const fs::path dir = fs::path(::testing::TempDir()) / "ds_huge_claim";
  fs::remove_all(dir);
  write_model_states(dir / "global_step1", "AdamW", 0x7fffffff);
  auto st = read_deepspeed_state(*default_storage(), dir.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().to_string().find("param_shapes names 12884901882 elements"),
            std::string::npos)
      << st.status().to_string();
}

// A stage-0 run (no ZeRO) saves param_shapes as None and torch's optimizer state in the model
// file: refused as such, not as a malformed ZeRO checkpoint.
TEST(DeepSpeedImportRefusal, AStageZeroCheckpointIsRefusedAsSuch) {
  const fs::path dir = fs::path(::testing::TempDir()) / "ds_stage0";
  fs::remove_all(dir);
  fs::create_directories(dir / "global_step1");
  std::ofstream(dir / "latest") << "global_step1\n";
  const std::string p =
      "\x80\x02}(" + str("param_shapes") + "N" + str("dp_world_size") + num(1) + "u.";
  std::ofstream(dir / "global_step1" / "mp_rank_00_model_states.pt", std::ios::binary)
      << archive(p, "");
  auto st = read_deepspeed_state(*default_storage(), dir.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().to_string().find("saved without ZeRO (stage 0"), std::string::npos)
      << st.status().to_string();
}

}  // namespace
}  // namespace zero::checkpoint
