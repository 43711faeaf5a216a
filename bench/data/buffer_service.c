/* A loopback HTTP service for bench/trace_service.py: each request maps a fresh 16 MiB buffer,
   writes every page of it, drops it and answers. Single-threaded, keep-alive.
     buffer_service PORT_FILE    listens on 127.0.0.1 (a free port, written to PORT_FILE) */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

enum { BUFFER_BYTES = 16 << 20, PAGE = 4096 };

static unsigned long handle(void) {
  unsigned char *buffer = mmap(NULL, BUFFER_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buffer == MAP_FAILED) return 0;
  unsigned long sum = 0;
  for (size_t at = 0; at < BUFFER_BYTES; at += PAGE) buffer[at] = (unsigned char)at, sum += buffer[at];
  munmap(buffer, BUFFER_BYTES);
  return sum;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
  if (bind(listener, (struct sockaddr *)&address, sizeof(address)) != 0 || listen(listener, 16) != 0) return 1;
  socklen_t length = sizeof(address);
  getsockname(listener, (struct sockaddr *)&address, &length);
  FILE *port = fopen(argv[1], "w");
  if (!port) return 1;
  fprintf(port, "%d\n", ntohs(address.sin_port));
  fclose(port);
  char request[4096], reply[128];
  for (;;) {
    int client = accept(listener, NULL, NULL);
    if (client < 0) continue;
    ssize_t got;
    while ((got = read(client, request, sizeof(request))) > 0) {
      unsigned long sum = handle();
      char body[32];
      int body_length = snprintf(body, sizeof(body), "%lu\n", sum);
      int reply_length = snprintf(reply, sizeof(reply), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", body_length, body);
      if (write(client, reply, (size_t)reply_length) != reply_length) break;
    }
    close(client);
  }
}
