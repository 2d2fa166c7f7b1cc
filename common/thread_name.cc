#include "common/thread_name.h"

#include <pthread.h>

namespace fedfs {

void NameThread(std::thread& t, const std::string& name) {
  pthread_setname_np(t.native_handle(), name.substr(0, 15).c_str());
}

}  // namespace fedfs
