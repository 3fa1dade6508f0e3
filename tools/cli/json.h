// A minimal JSON object writer for the --json result line and the bench file: flat keys, numbers,
// strings, booleans, nested raw values. Non-finite numbers become null (JSON has no inf/NaN).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>

namespace flashattn::cli {

class JsonObject {
public:
    JsonObject& number(const std::string& key, double value) {
        std::ostringstream text;
        text.precision(6);
        if (std::isfinite(value)) text << value; else text << "null";
        return raw(key, text.str());
    }
    JsonObject& integer(const std::string& key, int64_t value) { return raw(key, std::to_string(value)); }
    JsonObject& boolean(const std::string& key, bool value) { return raw(key, value ? "true" : "false"); }
    JsonObject& string(const std::string& key, const std::string& value) { return raw(key, quote(value)); }
    JsonObject& raw(const std::string& key, const std::string& json) {
        body_ += (body_.empty() ? "" : ",") + quote(key) + ":" + json;
        return *this;
    }
    std::string str() const { return "{" + body_ + "}"; }

    static std::string quote(const std::string& text) {
        std::string out = "\"";
        for (const char c : text) {
            switch (c) {
                case '"': out += "\\\""; break;
                case '\\': out += "\\\\"; break;
                case '\n': out += "\\n"; break;
                case '\t': out += "\\t"; break;
                default:
                    if (static_cast<unsigned char>(c) < 0x20) {
                        char escaped[8];
                        std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
                        out += escaped;
                    } else {
                        out += c;
                    }
            }
        }
        return out + "\"";
    }

private:
    std::string body_;
};

} // namespace flashattn::cli
