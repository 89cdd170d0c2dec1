// ucm/format/format.h: all of the ucm store format (formats/store/store_v1.md), one header per
// group of spec sections. Include a section's header where that is all a file needs.
#pragma once
#include "ucm/format/common.h"
#include "ucm/format/data_file.h"
#include "ucm/format/fptable_file.h"
#include "ucm/format/gc_request.h"
#include "ucm/format/sglang_pages.h"
#include "ucm/format/index_values.h"
#include "ucm/format/io.h"
#include "ucm/format/layout.h"
#include "ucm/format/records.h"
#include "ucm/format/shards.h"
#include "ucm/format/superblock.h"
#include "ucm/format/writer_lock.h"
