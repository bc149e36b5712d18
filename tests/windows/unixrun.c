/* A Windows program that runs a Linux program beside it, for tests under Wine only: NAME.exe runs
 * NAME.unix (an executable script) through Wine's __wine_unix_spawnvp, passing
 *   argv[1]  a file for its output (stdout and stderr), argv[2] a file for its exit code,
 *   argv[3]  the value of INCLUDE (cl.exe reads it), then this program's own arguments,
 * and prints that output and exits with that code. Wine starts a Linux program from CreateProcess
 * without a process handle to wait on, so a cl.exe or vswhere.exe stand-in has to be a PE. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>

typedef LONG (CDECL *spawn_t)(char *const argv[], int wait);
typedef char *(CDECL *unix_name_t)(LPCWSTR);

static char *utf8(const wchar_t *w) {
    int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, NULL, 0, NULL, NULL);
    char *s = malloc(n);
    WideCharToMultiByte(CP_UTF8, 0, w, -1, s, n, NULL, NULL);
    return s;
}

int wmain(int argc, wchar_t **argv) {
    spawn_t spawn = (spawn_t)GetProcAddress(GetModuleHandleA("ntdll"), "__wine_unix_spawnvp");
    unix_name_t unix_name = (unix_name_t)GetProcAddress(GetModuleHandleA("kernel32"), "wine_get_unix_file_name");
    if (!spawn || !unix_name) { fputs("unixrun: not under Wine\n", stderr); return 127; }
    wchar_t self[MAX_PATH + 8], tmp[MAX_PATH], out[MAX_PATH], code[MAX_PATH], include[32768];
    DWORD n = GetModuleFileNameW(NULL, self, MAX_PATH);
    if (n < 4) return 127;
    wcscpy(self + n - 4, L".unix");
    GetTempPathW(MAX_PATH, tmp);
    GetTempFileNameW(tmp, L"urn", 0, out);
    GetTempFileNameW(tmp, L"urc", 0, code);
    if (!GetEnvironmentVariableW(L"INCLUDE", include, 32768)) include[0] = 0;
    char **args = calloc(argc + 5, sizeof(char *));
    args[0] = unix_name(self);
    args[1] = unix_name(out);
    args[2] = unix_name(code);
    args[3] = utf8(include);
    for (int i = 1; i < argc; i++) args[i + 3] = utf8(argv[i]);
    if (!args[0] || !args[1] || !args[2]) return 127;
    spawn(args, 1);
    char buf[65536];
    size_t got;
    FILE *f = _wfopen(out, L"rb");
    if (f) {
        while ((got = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, got, stdout);
        fclose(f);
    }
    fflush(stdout);
    int rc = 127;
    f = _wfopen(code, L"rb");
    if (f) { if (fscanf(f, "%d", &rc) != 1) rc = 127; fclose(f); }
    DeleteFileW(out);
    DeleteFileW(code);
    return rc;
}
