// symbols.cpp: a code address as its source place, "file:line (function)", inlined frames first
// and ", inlined at ..." outwards (addr2line from binutils, once per address). The reports name
// places this way for every user of the runtime: Python and C++ (the cuDNN stand-in) alike.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "runtime.h"

namespace cuemu {
namespace {

bool on_path(const char* tool) {
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "";
    for (size_t at = 0; at <= dirs.size();) {
        size_t end = dirs.find(':', at);
        if (end == std::string::npos) end = dirs.size();
        std::string candidate = dirs.substr(at, end - at) + "/" + tool;
        if (end > at && access(candidate.c_str(), X_OK) == 0) return true;
        at = end + 1;
    }
    return false;
}

std::string quoted(const std::string& s) {          // for the shell: '...' with ' as '\''
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string without_parameters(std::string function) {   // "ns::f(int, float*)" -> "ns::f"
    int depth = 0;
    for (size_t i = function.size(); i-- > 0;) {
        if (function[i] == ')') ++depth;
        if (function[i] == '(' && --depth == 0) return i && function.back() == ')' ? function.substr(0, i) : function;
    }
    return function;
}

std::string without_discriminator(std::string place) {   // "conv.cu:12 (discriminator 2)" -> "conv.cu:12"
    size_t at = place.find(" (discriminator");
    return at == std::string::npos ? place : place.substr(0, at);
}

std::string lookup(uintptr_t pc) {
    Dl_info info;
    if (!pc || !dladdr(reinterpret_cast<void*>(pc), &info) || !info.dli_fname) return "an unknown place";
    char offset[32];
    std::snprintf(offset, sizeof offset, "%#zx", size_t(pc - uintptr_t(info.dli_fbase) - 1));  // the call, not after
    std::string fallback = base_name(info.dli_fname) + "+" + offset;
    static const bool have_addr2line = on_path("addr2line");
    if (!have_addr2line) return fallback;
    std::string command = "addr2line -f -i -C -e " + quoted(info.dli_fname) + " " + offset + " 2>/dev/null";
    FILE* out = popen(command.c_str(), "r");
    if (!out) return fallback;
    std::vector<std::string> lines;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, out)) {
        std::string line(buf);
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
        lines.push_back(line);
    }
    pclose(out);
    std::string frames;
    for (size_t i = 0; i + 1 < lines.size(); i += 2)
        frames += (frames.empty() ? "" : ", inlined at ") + without_discriminator(base_name(lines[i + 1])) + " (" +
                  without_parameters(lines[i]) + ")";
    return frames.empty() ? fallback : frames;
}

}  // namespace

std::string base_name(const std::string& path) {
    size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string where(uintptr_t pc) {
    static std::map<uintptr_t, std::string> known_places;
    auto it = known_places.find(pc);
    if (it == known_places.end()) it = known_places.emplace(pc, lookup(pc)).first;
    return it->second;
}

}  // namespace cuemu
