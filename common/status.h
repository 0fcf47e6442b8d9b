// Status: the result of an operation that can fail with a message a learner can act on.
// Used instead of exceptions at module boundaries so that a kernel launcher can say
// "head_dim 300 is not supported (max 256)" and the CLI can print it as one line.
#pragma once

#include <string>
#include <utility>

namespace attn {

class Status {
 public:
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }

  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const { return message_; }

 private:
  Status() = default;
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}

  bool failed_ = false;
  std::string message_;
};

}  // namespace attn
