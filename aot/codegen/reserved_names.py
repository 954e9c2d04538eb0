"""Names a package's public identifiers (the fields of <name>_inputs / <name>_outputs) must not take.

A field is a struct member, so only names that the preprocessor or the parser sees before the
member's own namespace matter: keywords of C and of C++ (the header is extern "C" for C++ users),
macros of the standard headers the package or its users include first (a field `INT32_MAX` or
`stdin` is replaced by the macro's text), macros compilers predefine outside strict ISO modes
(`linux`, `unix` under -std=gnu11 or g++), the type names the structs use (in C++ a member named
`int64_t` changes what a later `int64_t *` member means), and the runtime's and the model's own
macros. Ordinary library functions (`exp`, `log`) are not macros and stay usable as field names.

The list is fixed here, not read from the machine's headers, so that a package is the same on
every machine. Each pattern ends in a letter or digit: a reserved name plus "_" is never reserved.
"""

from __future__ import annotations

import re

_C_KEYWORDS = """
auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert
_Thread_local alignas alignof bool constexpr false nullptr static_assert thread_local true typeof
typeof_unqual _BitInt _Decimal32 _Decimal64 _Decimal128 asm fortran main
"""
_CPP_KEYWORDS = """
and and_eq bitand bitor catch char8_t char16_t char32_t class compl concept consteval constinit
const_cast co_await co_return co_yield decltype delete dynamic_cast explicit export friend mutable
namespace new noexcept not not_eq operator or or_eq private protected public reinterpret_cast requires
static_cast template this throw try typeid typename using virtual wchar_t xor xor_eq
"""
# Object-like and function-like macros of <stdio.h>, <errno.h>, <stdint.h>, <inttypes.h>, <math.h>,
# <stddef.h>, <stdbool.h>, <assert.h>, <limits.h>, <float.h>, and of <stdlib.h>, <string.h>,
# <time.h> that the runner includes (glibc and newlib spellings; the families are patterns below).
_LIBRARY_MACROS = """
EOF BUFSIZ FILENAME_MAX FOPEN_MAX L_tmpnam L_ctermid L_cuserid P_tmpdir TMP_MAX SEEK_SET SEEK_CUR
SEEK_END stdin stdout stderr NULL offsetof unreachable errno assert NDEBUG
__bool_true_false_are_defined HUGE_VAL HUGE_VALF HUGE_VALL INFINITY NAN MATH_ERRNO MATH_ERREXCEPT
math_errhandling fpclassify isfinite isinf isnan isnormal signbit isgreater isgreaterequal isless
islessequal islessgreater isunordered DECIMAL_DIG CHAR_BIT MB_LEN_MAX MB_CUR_MAX EXIT_SUCCESS
EXIT_FAILURE RAND_MAX CLOCKS_PER_SEC TIME_UTC TIMER_ABSTIME alloca WNOHANG WUNTRACED WSTOPPED WEXITED
WCONTINUED WNOWAIT WEXITSTATUS WTERMSIG WSTOPSIG WIFEXITED WIFSIGNALED WIFSTOPPED WIFCONTINUED
FD_SETSIZE FD_SET FD_CLR FD_ISSET FD_ZERO NFDBITS BYTE_ORDER LITTLE_ENDIAN BIG_ENDIAN PDP_ENDIAN
htobe16 htole16 be16toh le16toh htobe32 htole32 be32toh le32toh htobe64 htole64 be64toh le64toh
"""
# <errno.h> (ISO C, POSIX and Linux error numbers).
_ERRNO_MACROS = """
E2BIG EACCES EADDRINUSE EADDRNOTAVAIL EADV EAFNOSUPPORT EAGAIN EALREADY EBADE EBADF EBADFD EBADMSG
EBADR EBADRQC EBADSLT EBFONT EBUSY ECANCELED ECHILD ECHRNG ECOMM ECONNABORTED ECONNREFUSED ECONNRESET
EDEADLK EDEADLOCK EDESTADDRREQ EDOM EDOTDOT EDQUOT EEXIST EFAULT EFBIG EHOSTDOWN EHOSTUNREACH
EHWPOISON EIDRM EILSEQ EINPROGRESS EINTR EINVAL EIO EISCONN EISDIR EISNAM EKEYEXPIRED EKEYREJECTED
EKEYREVOKED EL2HLT EL2NSYNC EL3HLT EL3RST ELIBACC ELIBBAD ELIBEXEC ELIBMAX ELIBSCN ELNRNG ELOOP
EMEDIUMTYPE EMFILE EMLINK EMSGSIZE EMULTIHOP ENAMETOOLONG ENAVAIL ENETDOWN ENETRESET ENETUNREACH
ENFILE ENOANO ENOBUFS ENOCSI ENODATA ENODEV ENOENT ENOEXEC ENOKEY ENOLCK ENOLINK ENOMEDIUM ENOMEM
ENOMSG ENONET ENOPKG ENOPROTOOPT ENOSPC ENOSR ENOSTR ENOSYS ENOTBLK ENOTCONN ENOTDIR ENOTEMPTY
ENOTNAM ENOTRECOVERABLE ENOTSOCK ENOTSUP ENOTTY ENOTUNIQ ENXIO EOPNOTSUPP EOVERFLOW EOWNERDEAD EPERM
EPFNOSUPPORT EPIPE EPROTO EPROTONOSUPPORT EPROTOTYPE ERANGE EREMCHG EREMOTE EREMOTEIO ERESTART
ERFKILL EROFS ESHUTDOWN ESOCKTNOSUPPORT ESPIPE ESRCH ESRMNT ESTALE ESTRPIPE ETIME ETIMEDOUT
ETOOMANYREFS ETXTBSY EUCLEAN EUNATCH EUSERS EWOULDBLOCK EXDEV EXFULL
"""
# Type names of those headers (the structs' members are `float *`, `int64_t *` ...).
_LIBRARY_TYPES = """
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t int_least8_t int_least16_t
int_least32_t int_least64_t uint_least8_t uint_least16_t uint_least32_t uint_least64_t int_fast8_t
int_fast16_t int_fast32_t int_fast64_t uint_fast8_t uint_fast16_t uint_fast32_t uint_fast64_t
intmax_t uintmax_t intptr_t uintptr_t size_t ssize_t ptrdiff_t max_align_t nullptr_t wint_t FILE
fpos_t va_list div_t ldiv_t lldiv_t imaxdiv_t float_t double_t clock_t time_t mbstate_t
"""
# What GCC and clang predefine in their GNU modes (-std=gnu11, g++ by default) for common hosts.
_PREDEFINED_MACROS = """
linux unix i386 i486 i586 i686 mips sparc sun vax hppa m68k mc68000 powerpc PPC sgi
"""
_NAMES = frozenset(" ".join([_C_KEYWORDS, _CPP_KEYWORDS, _LIBRARY_MACROS, _ERRNO_MACROS, _LIBRARY_TYPES,
                             _PREDEFINED_MACROS]).split())
# Families: <stdint.h>/<limits.h> limits and constant macros (INT32_MAX, UINT8_C, SIZE_MAX, PATH_MAX:
# POSIX reserves every *_MAX for <limits.h>), <inttypes.h> format macros, <float.h> and <math.h>
# (FLT_MAX, FP_NAN, M_PI), the clocks of <time.h>.
_PATTERNS = re.compile("|".join([
    r"[A-Z][A-Z0-9_]*_(MAX|MIN)",
    r"U?INT(8|16|32|64|MAX)_C",
    r"(U?INT[0-9A-Z_]*|S?CHAR|UCHAR|U?SHRT|U?L?LONG|BOOL|PTRDIFF|SIZE|SIG_ATOMIC|WCHAR|WINT)_WIDTH",
    r"(PRI|SCN)[diouxX](8|16|32|64|LEAST8|LEAST16|LEAST32|LEAST64|FAST8|FAST16|FAST32|FAST64|MAX|PTR)",
    r"(FLT|DBL|LDBL)[0-9]*X?_[A-Z0-9_]*[A-Z0-9]",
    r"(FP|M|CLOCK)_[A-Z0-9_]*[A-Z0-9]",
]))
# Prefixes: identifiers the C and C++ standards reserve to the implementation, the package
# runtime's macros (runtime/aot_runtime.h: AOT_ALIGNED, ...). A name with one gets a prefix.
_PREFIXES = re.compile(r"__|_[A-Z]|AOT_")
# The macros <name>.h and <name>_weights.h define after their NAME_ prefix (templates/c/*.h.j2).
_OWN_MACRO_SUFFIXES = re.compile(r"H_INCLUDED|WEIGHTS_H_INCLUDED|ARENA_SIZE|ARENA_ALIGN|WEIGHTS_SIZE|NUM_INPUTS|"
                                 r"NUM_OUTPUTS|DECLARE_ARENA|(INPUT|OUTPUT)[0-9]+_(DTYPE|RANK|SHAPE|SIZE|BYTES)")


# The <math.h> functions the kernel printer calls for unary ops of the same name (with an "f"
# suffix for float): a kernel parameter must not shadow them.
MATH_UNARY_FUNCTIONS = frozenset([
    "exp", "log", "sqrt", "tanh", "erf", "floor", "ceil", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
    "cosh", "asinh", "acosh", "atanh", "log1p", "expm1",
])
# The other functions it calls, for pow, float mod, abs and round-to-even.
MATH_OTHER_FUNCTIONS = frozenset(["pow", "fmod", "fabs", "nearbyint"])


def is_reserved_public(ident: str, own_macro_prefix: str | tuple[str, ...] = "") -> bool:
    """Whether `ident` cannot be a public struct field; `own_macro_prefix` is the model's macro
    prefix ("TINY_CNN_": the header defines TINY_CNN_ARENA_SIZE ...), or the prefixes of every
    model of a package, for the weights struct they share."""
    prefixes = (own_macro_prefix,) if isinstance(own_macro_prefix, str) else own_macro_prefix
    own = any(p and ident.startswith(p) and bool(_OWN_MACRO_SUFFIXES.fullmatch(ident[len(p):]))
              for p in prefixes)
    return ident in _NAMES or bool(_PATTERNS.fullmatch(ident)) or own or needs_prefix(ident)


def needs_prefix(ident: str) -> bool:
    """Whether `ident` is reserved by how it starts (so an appended "_" does not free it)."""
    return bool(_PREFIXES.match(ident))
