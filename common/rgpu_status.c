/* rgpu_status_str: see rgpu_status.h. */
#include "rgpu_status.h"

#define CASE_TEXT(code, name, text) \
  case code: return text;
#define CASE_NAME(code, name, text) \
  case code: return name;

const char *rgpu_status_str(rgpu_status s) {
  switch (s) {
  case 0: return "success";
  RGPU_STATUS_LOCAL(CASE_TEXT)
  default: return s > 0 ? "CUDA error" : "unknown local error";
  }
}

const char *rgpu_status_name(rgpu_status s) {
  switch (s) {
  RGPU_STATUS_LOCAL(CASE_NAME)
  default: return NULL;
  }
}
