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

    public LogIoThread(string name)
    {
        _thread = new Thread(Run) { IsBackground = true, Name = name, Priority = ThreadPriority.AboveNormal };
        _thread.Start();
    }

    public void Post(IThreadPoolWorkItem item)
    {
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

    private void Run()
    {
        while (true)
        {
            _signal.WaitOne();
            while (_queue.TryDequeue(out var item))
            {
                item.Execute();
            }

            if (_stopping && _queue.IsEmpty)
            {
                return;
            }
        }
    }
}
