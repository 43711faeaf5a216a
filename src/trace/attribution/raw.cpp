// Raw records in a gzip stream (see raw.hpp for the format).
#include "trace/attribution/raw.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>

namespace memcost::trace {
namespace {

constexpr char kMagic[] = "memcost-trace-raw 1\n";

template <typename T>
void append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

class In {
 public:
  explicit In(gzFile file) : file_(file) {}
  template <typename T>
  bool take(T& value) {
    return gzread(file_, &value, sizeof(value)) == static_cast<int>(sizeof(value));
  }

 private:
  gzFile file_;
};

}  // namespace

RawWriter::RawWriter(const std::string& path, Sink& next) : next_(next), path_(path) {
  gzFile file = gzopen(path.c_str(), "wb1");  // fast compression: the tracer must keep up
  if (file == nullptr) {
    error_ = "cannot write " + path + ": " + std::strerror(errno ? errno : EIO);
    return;
  }
  gzbuffer(file, 1 << 20);
  file_ = file;
  put(kMagic, sizeof(kMagic) - 1);
}

RawWriter::~RawWriter() { close(); }

void RawWriter::close() {
  if (file_ == nullptr) return;
  if (gzclose(static_cast<gzFile>(file_)) != Z_OK && error_.empty()) error_ = "cannot finish writing " + path_;
  file_ = nullptr;
}

void RawWriter::put(const void* bytes, std::size_t size) {
  if (file_ == nullptr) return;
  if (gzwrite(static_cast<gzFile>(file_), bytes, static_cast<unsigned>(size)) != static_cast<int>(size) && error_.empty()) {
    error_ = "cannot write " + path_ + " (disk full?)";
  }
}

void RawWriter::fault(const Fault& fault) {
  std::string record;
  record.reserve(32);
  record.push_back('f');
  append<std::int32_t>(record, fault.pid);
  append<std::int32_t>(record, fault.tid);
  append<std::uint64_t>(record, fault.time_ns);
  append<std::uint64_t>(record, fault.address);
  append<std::uint32_t>(record, fault.stack);
  append<std::uint8_t>(record, fault.user_mode ? 1 : 0);
  put(record.data(), record.size());
  next_.fault(fault);
}

void RawWriter::call(const MappingCall& call) {
  std::string record;
  record.reserve(96);
  record.push_back('c');
  append<std::uint8_t>(record, static_cast<std::uint8_t>(call.kind));
  append<std::int32_t>(record, call.pid);
  append<std::int32_t>(record, call.tid);
  append<std::uint64_t>(record, call.enter_ns);
  append<std::uint64_t>(record, call.exit_ns);
  for (std::uint64_t arg : call.args) append<std::uint64_t>(record, arg);
  append<std::int64_t>(record, call.result);
  append<std::uint32_t>(record, call.stack);
  put(record.data(), record.size());
  next_.call(call);
}

void RawWriter::process(const ProcessEvent& event) {
  std::string record;
  record.push_back('p');
  append<std::uint8_t>(record, static_cast<std::uint8_t>(event.change));
  append<std::int32_t>(record, event.pid);
  append<std::int32_t>(record, event.parent);
  append<std::uint64_t>(record, event.time_ns);
  char name[16] = {};
  std::memcpy(name, event.name.data(), std::min<std::size_t>(event.name.size(), 15));
  record.append(name, sizeof(name));
  put(record.data(), record.size());
  next_.process(event);
}

bool replay(const std::string& path, Sink& sink, std::string& error) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    error = "cannot read " + path + ": " + std::strerror(errno ? errno : EIO);
    return false;
  }
  struct Close {
    gzFile file;
    ~Close() { gzclose(file); }
  } closing{file};
  char magic[sizeof(kMagic) - 1] = {};
  if (gzread(file, magic, sizeof(magic)) != static_cast<int>(sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(magic)) != 0) {
    error = path + " is not a memcost trace raw file";
    return false;
  }
  In in(file);
  for (char kind = 0; in.take(kind);) {
    bool whole = true;
    if (kind == 'f') {
      Fault fault;
      std::uint8_t user = 0;
      whole = in.take(fault.pid) && in.take(fault.tid) && in.take(fault.time_ns) && in.take(fault.address) &&
              in.take(fault.stack) && in.take(user);
      fault.user_mode = user != 0;
      if (whole) sink.fault(fault);
    } else if (kind == 'c') {
      MappingCall call;
      std::uint8_t call_kind = 0;
      whole = in.take(call_kind) && in.take(call.pid) && in.take(call.tid) && in.take(call.enter_ns) && in.take(call.exit_ns);
      for (std::uint64_t& arg : call.args) whole = whole && in.take(arg);
      whole = whole && in.take(call.result) && in.take(call.stack) && call_kind <= static_cast<std::uint8_t>(CallKind::existing);
      call.kind = static_cast<CallKind>(call_kind);
      if (whole) sink.call(call);
    } else if (kind == 'p') {
      ProcessEvent event;
      std::uint8_t change = 0;
      char name[16] = {};
      whole = in.take(change) && in.take(event.pid) && in.take(event.parent) && in.take(event.time_ns) && in.take(name) &&
              change <= static_cast<std::uint8_t>(ProcessChange::exit);
      event.change = static_cast<ProcessChange>(change);
      event.name.assign(name, strnlen(name, sizeof(name)));
      if (whole) sink.process(event);
    } else {
      whole = false;
    }
    if (!whole) {
      error = path + " is cut short or damaged (a record of kind '" + std::string(1, kind) + "' is incomplete)";
      return false;
    }
  }
  int code = 0;
  gzerror(file, &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    error = path + " is damaged (" + std::string(gzerror(file, &code)) + ")";
    return false;
  }
  sink.settle(UINT64_MAX);
  return true;
}

}  // namespace memcost::trace
