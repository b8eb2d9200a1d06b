#include "runtime/token_agreement.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "comm/thread_communicator.h"
#include "runtime/generate.h"

namespace zero::runtime {
namespace {

constexpr int64_t kVocab = 16;
constexpr int32_t kEos = 15;

// A decoder whose next token is last + 1 (mod 15), except on `odd_rank` at its `odd_append`-th
// append of slot 0, where EOS outscores it: a rank whose logits differ from its peers' once.
class RankSkewedDecoder final : public model::CachedDecoder {
 public:
  RankSkewedDecoder(int64_t slots, int rank, int odd_rank, int64_t odd_append)
      : lengths_(static_cast<size_t>(slots), 0),
        rank_(rank),
        odd_rank_(odd_rank),
        odd_append_(odd_append) {}
  int64_t slots() const override { return static_cast<int64_t>(lengths_.size()); }
  int64_t capacity() const override { return 64; }
  int64_t slot_length(int64_t slot) const override { return lengths_[static_cast<size_t>(slot)]; }
  void reset_slot(int64_t slot) override { lengths_[static_cast<size_t>(slot)] = 0; }
  void append_batch(model::ParamAccess&, std::span<const model::SlotTokens> entries,
                    float* logits) override {
    for (size_t e = 0; e < entries.size(); ++e) {
      const model::SlotTokens& t = entries[e];
      float* row = logits + e * kVocab;
      std::fill(row, row + kVocab, 0.0f);
      row[(t.tokens[t.n - 1] + 1) % kEos] = 1.0f;
      if (rank_ == odd_rank_ && t.slot == 0 && appends_++ == odd_append_) row[kEos] = 2.0f;
      lengths_[static_cast<size_t>(t.slot)] += t.n;
    }
  }

 private:
  std::vector<int64_t> lengths_;
  int rank_, odd_rank_;
  int64_t odd_append_, appends_ = 0;
};

class NoParams final : public model::ParamAccess {
 public:
  model::ParamView acquire(int) override { return {}; }
  void release(int) override {}
};

class Finished final : public BatchObserver {
 public:
  bool on_token(int64_t, int32_t) override { return false; }
  Status on_finish(int64_t, FinishReason) override { return ok_status(); }
};

model::ModelConfig config() {
  model::ModelConfig c;
  c.vocab_size = kVocab;
  c.max_position_embeddings = 64;
  return c;
}

std::vector<BatchSequence> batch(TokenSync* sync) {
  std::vector<BatchSequence> seqs(3);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].tokens = {static_cast<int32_t>(i), static_cast<int32_t>(i + 3)};
    seqs[i].options.temperature = 0.0;
    seqs[i].options.max_new_tokens = 6;
    seqs[i].options.stop_tokens = {kEos};
    seqs[i].options.sync = sync;
  }
  return seqs;
}

// Rank 2 of 3 picks EOS once where ranks 0 and 1 pick the next id. Without agreement its first
// sequence would end there (and, on GPU ranks, its peers would wait in the next gather); with it,
// every rank keeps rank 0's tokens, and only rank 2 counts a difference.
TEST(TokenAgreement, EveryRankKeepsRankZerosTokensAndTheOddRankCountsItsOwn) {
  NoParams params;
  std::vector<BatchSequence> alone = batch(nullptr);
  {
    RankSkewedDecoder decoder(2, 0, /*odd_rank=*/-1, 0);
    Finished done;
    ASSERT_TRUE(generate_batch_cached(decoder, config(), params, alone, done).ok());
  }
  std::mutex mu;
  std::vector<std::vector<std::vector<int32_t>>> got(3);
  std::vector<int64_t> differed(3), agreed(3);
  std::vector<std::string> reports(3);
  ThreadCommunicator::run(3, [&](Communicator& comm) {
    TokenAgreement agreement(comm);
    std::vector<BatchSequence> seqs = batch(&agreement);
    RankSkewedDecoder decoder(2, comm.rank(), /*odd_rank=*/2, /*odd_append=*/2);
    Finished done;
    const Status s = generate_batch_cached(decoder, config(), params, seqs, done);
    EXPECT_TRUE(s.ok()) << s.to_string();
    std::lock_guard<std::mutex> lock(mu);
    const size_t r = static_cast<size_t>(comm.rank());
    for (const BatchSequence& seq : seqs) got[r].push_back(seq.tokens);
    differed[r] = agreement.differed();
    agreed[r] = agreement.tokens();
    reports[r] = agreement.report();
  });
  for (size_t r = 0; r < 3; ++r) {
    ASSERT_EQ(got[r].size(), alone.size());
    for (size_t i = 0; i < alone.size(); ++i) {
      EXPECT_EQ(got[r][i], alone[i].tokens) << "rank " << r << ", sequence " << i;
    }
    EXPECT_EQ(agreed[r], 18) << "3 sequences x 6 new tokens";
  }
  EXPECT_EQ(differed[0], 0);
  EXPECT_EQ(differed[1], 0);
  EXPECT_EQ(differed[2], 1);
  EXPECT_EQ(reports[0], "");
  EXPECT_NE(reports[2].find("[rank 2] warning: 1 of 18 new tokens"), std::string::npos)
      << reports[2];
}

// One rank alone agrees with itself: nothing changes and nothing is reported.
TEST(TokenAgreement, AWorldOfOneKeepsItsTokens) {
  ThreadCommunicator::run(1, [&](Communicator& comm) {
    TokenAgreement agreement(comm);
    std::vector<int32_t> tokens = {4, 9, 2};
    ASSERT_TRUE(agreement.agree(tokens).ok());
    EXPECT_EQ(tokens, (std::vector<int32_t>{4, 9, 2}));
    EXPECT_EQ(agreement.differed(), 0);
    EXPECT_EQ(agreement.report(), "");
  });
}

// A rank's failure agreed: OK when no rank failed; the failing ranks keep their own errors, the
// others get one naming the lowest failing rank (ranks 1 and 2 of 4 fail); a world of one its own.
TEST(AgreeOnStatus, EveryRankEndsWithAnErrorNamingTheFirstFailingRank) {
  std::mutex mu;
  std::vector<std::string> got(4);
  ThreadCommunicator::run(4, [&](Communicator& comm) {
    EXPECT_TRUE(agree_on_status(comm, ok_status()).ok());
    const bool fails = comm.rank() == 1 || comm.rank() == 2;
    const Status s =
        agree_on_status(comm, fails ? io_error("rank {} read", comm.rank()) : ok_status());
    std::lock_guard<std::mutex> lock(mu);
    got[static_cast<size_t>(comm.rank())] = s.message();
  });
  EXPECT_NE(got[0].find("rank 1 failed"), std::string::npos) << got[0];
  EXPECT_EQ(got[1], "rank 1 read");
  EXPECT_EQ(got[2], "rank 2 read");
  EXPECT_NE(got[3].find("rank 1 failed"), std::string::npos) << got[3];
  ThreadCommunicator::run(1, [&](Communicator& comm) {
    EXPECT_EQ(agree_on_status(comm, io_error("alone")).message(), "alone");
  });
}

}  // namespace
}  // namespace zero::runtime
