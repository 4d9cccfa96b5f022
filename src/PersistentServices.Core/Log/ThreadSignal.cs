using System.Runtime.InteropServices;

namespace PersistentServices.Log;

/// <summary>
/// Wakes one dedicated thread (an auto-reset event with a single waiter), for <see cref="LogIoThread"/>. On Linux it is a
/// futex word: <see cref="Set"/> is an atomic exchange and, when the flag was clear, one <c>FUTEX_WAKE</c>; the waiter
/// sleeps in <c>FUTEX_WAIT</c> only while the flag is clear, so no wake-up is lost. An <see cref="AutoResetEvent"/> on
/// Linux goes through the runtime's emulation of Windows events: a process-wide lock, the waiter's mutex and condition
/// variable, and a second futex wake when the woken thread finds that mutex taken (docs/benchmarks.md, "A cheaper wake-up
/// for the log's thread"). Elsewhere, and if the futex call is refused, it is an <see cref="AutoResetEvent"/>.
/// </summary>
internal sealed unsafe partial class ThreadSignal : IDisposable
{
    private const int FutexWaitPrivate = 0 | 128;
    private const int FutexWakePrivate = 1 | 128;
    private const int Eagain = 11;
    private const int Eintr = 4;

    private static readonly long FutexSyscall = !OperatingSystem.IsLinux() ? -1 : RuntimeInformation.ProcessArchitecture switch
    {
        Architecture.X64 => 202,
        Architecture.Arm64 => 98,
        _ => -1,
    };

    // On the pinned object heap: its address never changes, and it stays valid for a late Set after Dispose.
    private readonly int[] _word = GC.AllocateArray<int>(1, pinned: true);
    private readonly AutoResetEvent? _event;

    public ThreadSignal()
    {
        if (FutexSyscall < 0)
        {
            _event = new AutoResetEvent(false);
        }
    }

    /// <summary>True when the signal is a futex word (Linux on x64 or arm64).</summary>
    public bool IsFutex => _event is null;

    /// <summary>Sets the signal; the waiting thread (if any) wakes, or its next <see cref="Wait"/> returns at once.</summary>
    public void Set()
    {
        if (_event is not null)
        {
            _event.Set();
            return;
        }

        if (Interlocked.Exchange(ref _word[0], 1) == 0)
        {
            Futex(FutexWakePrivate, 1);
        }
    }

    /// <summary>Waits until the signal is set, and clears it. One thread waits at a time.</summary>
    public void Wait()
    {
        if (_event is not null)
        {
            _event.WaitOne();
            return;
        }

        while (Interlocked.Exchange(ref _word[0], 0) == 0)
        {
            // Sleeps only if the word is still 0 (EAGAIN otherwise); a wake, a signal (EINTR) or a spurious return loops.
            if (Futex(FutexWaitPrivate, 0) < 0 && Marshal.GetLastPInvokeError() is not (Eagain or Eintr))
            {
                throw new IOException($"futex wait failed (errno {Marshal.GetLastPInvokeError()}).");
            }
        }
    }

    public void Dispose() => _event?.Dispose();

    private long Futex(int operation, int value)
    {
        fixed (int* word = _word)
        {
            return Syscall(FutexSyscall, word, operation, value, 0, 0, 0);
        }
    }

    // glibc's syscall(2) is variadic; on x64 and arm64 Linux its arguments travel in the same registers as a fixed call's.
    [LibraryImport("libc", EntryPoint = "syscall", SetLastError = true)]
    private static partial long Syscall(long number, int* address, int operation, int value, nint timeout, nint address2, int value3);
}
