// Copyright horovod_cpp authors. Controller::agree_on_responses(): every rank's verdict on a
// full cycle's responses, before they are cached or run.
//
// Each rank checks the broadcast responses against its own requests (the ResponseCheck). A
// rank that finds one wrong must not run it, and then no rank may: the others would wait for
// it in the collective, or exchange sizes it does not expect. So the verdicts are ANDed
// across the set (one bit per response, and a word whose bit says whether any rank found
// anything, so the common case decides after one small allreduce), and the responses some
// rank refused turn into errors on every rank. Only then are the findings themselves
// exchanged (gathered at rank 0 and broadcast), so each rank's message says what every
// refusing rank found; the verdict never depends on that exchange.
#include <string>
#include <vector>

#include "coordination/controller.h"
#include "coordination/wire.h"

namespace hvd {
namespace {

constexpr uint64_t kNoneFound = 1;  // word 0: cleared by a rank that found something

// The findings of one rank (or, from rank 0, of all of them): one note per refused response,
// its index in `root` and the text in `error`, sent as a ResponseList (wire.h decodes it
// with its bounds checks).
ResponseList notes_of(const std::vector<Response>& responses,
                      const std::vector<std::string>& problems) {
  ResponseList notes;
  for (size_t i = 0; i < problems.size(); ++i) {
    if (problems[i].empty()) continue;
    Response note;
    note.root = static_cast<int32_t>(i);
    note.name = responses[i].name;
    note.error = problems[i];
    notes.responses.push_back(std::move(note));
  }
  return notes;
}

}  // namespace

Status Controller::agree_on_responses(std::vector<Response>* responses) {
  const size_t n = responses->size();
  std::vector<std::string> problems(n);
  response_check_(*responses, &problems);
  std::vector<uint64_t> v(1 + (n + 63) / 64, ~0ull);  // a set bit: nothing found here
  for (size_t i = 0; i < n; ++i) {
    if (problems[i].empty() || !(*responses)[i].ok()) continue;
    v[1 + i / 64] &= ~(1ull << (i % 64));
    v[0] &= ~kNoneFound;
  }
  HVD_RETURN_IF_ERROR(plane_->allreduce_and(&v));
  if (v[0] & kNoneFound) return Status::OK();

  // Some rank refused some response: exchange the findings for the messages.
  std::vector<std::string> gathered;
  HVD_RETURN_IF_ERROR(plane_->gather(serialize(notes_of(*responses, problems)), &gathered));
  std::string blob;
  if (plane_->rank() == 0) {
    std::vector<std::string> merged(n);
    for (const std::string& g : gathered) {
      ResponseList notes;
      if (!deserialize(g, &notes).ok()) continue;  // the verdict stands without its text
      for (const Response& note : notes.responses) {
        const size_t i = static_cast<size_t>(note.root);
        if (note.root < 0 || i >= n) continue;
        merged[i] += (merged[i].empty() ? "" : "; ") + note.error;
      }
    }
    blob = serialize(notes_of(*responses, merged));
  }
  HVD_RETURN_IF_ERROR(plane_->broadcast(&blob));
  std::vector<std::string> found(n);
  ResponseList notes;
  if (deserialize(blob, &notes).ok()) {
    for (const Response& note : notes.responses) {
      if (note.root >= 0 && static_cast<size_t>(note.root) < n) found[note.root] = note.error;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if ((v[1 + i / 64] >> (i % 64)) & 1ull) continue;
    Response& r = (*responses)[i];
    if (found[i].empty()) found[i] = problems[i].empty() ? "another rank refused it" : problems[i];
    // The findings repeat the tensor's "op 'name': " each: said once, in front.
    const std::string prefix = std::string(op_type_name(r.op)) + " '" + r.name + "': ";
    for (size_t at; (at = found[i].find(prefix)) != std::string::npos;)
      found[i].erase(at, prefix.size());
    r.error = prefix + "rank 0's response does not match what was submitted, so no rank ran it (" +
              found[i] + ")";
  }
  return Status::OK();
}

}  // namespace hvd
