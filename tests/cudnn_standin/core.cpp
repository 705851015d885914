// Refusal messages and the object ledger of the stand-in (standin.h).
#include <map>
#include <string>
#include <unordered_map>

#include "standin.h"

namespace lenet::emu {

namespace {
thread_local std::string last_rule;   // "<call>: <rule>" of the last refusal on this thread
thread_local int last_status = 0;
thread_local std::string described;   // what describe() returned last
std::unordered_map<const void*, const char*> objects;   // live object -> kind
std::map<std::string, long> created, destroyed;
std::vector<std::string> misuse_log;
}  // namespace

void record(const char* call, int status, const std::string& rule) {
    last_rule = std::string(call) + ": " + rule;
    last_status = status;
}

const char* describe(int status, const char* name, bool bare) {
    const bool refused = status != 0 && status == last_status;
    described = refused && bare ? "stand-in: " + last_rule
                : refused       ? std::string(name) + " (stand-in: " + last_rule + ")"
                                : std::string(name);
    return described.c_str();
}

void born(const void* object, const char* kind) {
    objects[object] = kind;
    ++created[kind];
}

bool alive(const void* object, const char* kind) {
    auto it = objects.find(object);
    return object && it != objects.end() && std::string(it->second) == kind;
}

void need_alive(const void* object, const char* kind, int status, const std::string& what) {
    if (!object) refuse(status, what + " is NULL");
    require(alive(object, kind), status, what + " is not a live " + kind + " (never created, or destroyed)");
}

void die(const void* object, const char* kind, int status, const char* call) {
    if (!alive(object, kind)) {
        misuse(std::string(call) + ": " + kind + " destroyed twice or never created");
        refuse(status, std::string("not a live ") + kind + " (destroyed twice, or never created)");
    }
    objects.erase(object);
    ++destroyed[kind];
}

std::vector<Counts> live_counts() {
    std::vector<Counts> out;
    for (const auto& [kind, n] : created) out.push_back({kind, n - destroyed[kind]});
    for (const Counts& c : memory_counts()) out.push_back(c);
    return out;
}

void misuse(const std::string& what) { misuse_log.push_back(what); }
std::vector<std::string> misuses() { return misuse_log; }
void reset_misuses() { misuse_log.clear(); }

}  // namespace lenet::emu
