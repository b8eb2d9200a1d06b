// CsvMonitor: DeepSpeed's csv_monitor — one CSV per event under output_path/job_name/, the event
// name with '/' replaced by '_', rows "step,value" with the x-axis DeepSpeed uses (global samples).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "core/status.h"

namespace zero::runtime {

class CsvMonitor {
 public:
  CsvMonitor(std::string output_path, std::string job_name);
  ~CsvMonitor();
  CsvMonitor(const CsvMonitor&) = delete;
  CsvMonitor& operator=(const CsvMonitor&) = delete;

  // Appends one row to the event's file (created with a header "step,<event>" on first use).
  Status write(const std::string& event, int64_t step, double value);

 private:
  std::string dir_;
  std::map<std::string, std::FILE*> files_;
};

}  // namespace zero::runtime
