// ucm/strings.h: small string helpers shared by the CLI, the pipelines and the library.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ucm {

/// Splits `s` at every ',' into its fields, in order, unchanged (no trimming): "a,,b" -> {"a",
/// "", "b"}; "" -> {} (no field); "a," -> {"a"} (a trailing empty field is dropped, as
/// std::getline(ss, x, ',') does). Callers decide what an empty field means.
std::vector<std::string> split_comma(std::string_view s);

}  // namespace ucm
