using System.Collections.Concurrent;

namespace PersistentServices.Log;

/// <summary>
/// The log's own thread: runs device I/O (<see cref="DirectFileDevice"/>) and the group commit's "issue the next
/// commit" step. Under load the thread pool's queue holds the application's request work, and a commit waiting behind it
/// makes every waiting request slower; a dedicated thread keeps the commit round trip at disk speed. Work items run in
/// order; an item must not block on another item.
/// </summary>
internal sealed class LogIoThread : IDisposable
{
    private readonly ConcurrentQueue<IThreadPoolWorkItem> _queue = new();
    // A blocking event, not SemaphoreSlim: SemaphoreSlim spins before it blocks, and on a 2-core machine the spinning
    // takes CPU from the requests that feed this thread.
    private readonly AutoResetEvent _signal = new(false);
    private readonly Thread _thread;
    private volatile bool _stopping;
    private int _pending;

    public LogIoThread(string name)
    {
        _thread = new Thread(Run) { IsBackground = true, Name = name, Priority = ThreadPriority.AboveNormal };
        _thread.Start();
    }

    /// <summary>
    /// Held around every segment write, on this thread and by a commit's leader writing inline
    /// (<see cref="DirectFileDevice.RunDeferredWrites"/>): no two writes run at once, so a kill -9 never leaves a later
    /// write (a commit record) on disk while an earlier one (the records it covers) is missing or half done.
    /// </summary>
    public Lock WriteOrder { get; } = new();

    /// <summary>Items posted and not yet finished: an inline write may start only when this is 0 (under <see cref="WriteOrder"/>).</summary>
    public int Pending => Volatile.Read(ref _pending);

    public void Post(IThreadPoolWorkItem item)
    {
        Interlocked.Increment(ref _pending);
        _queue.Enqueue(item);
        _signal.Set();
    }

    public void Dispose()
    {
        _stopping = true;
        _signal.Set();
        _thread.Join();
        _signal.Dispose();
    }

    // The thread's whole life is this loop: compiled optimized at once (a tier-0 loop is only replaced on stack later).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    private void Run()
    {
        while (true)
        {
            _signal.WaitOne();
            while (_queue.TryDequeue(out var item))
            {
                try
                {
                    item.Execute();
                }
                finally
                {
                    Interlocked.Decrement(ref _pending);
                }
            }

            if (_stopping && _queue.IsEmpty)
            {
                return;
            }
        }
    }
}
