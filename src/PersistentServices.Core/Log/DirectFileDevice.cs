using System.Collections.Concurrent;
using FASTER.core;
using Microsoft.Win32.SafeHandles;

namespace PersistentServices.Log;

/// <summary>
/// A FASTER device over local segment files (<c>{base}.{segment}</c>). Writes go through a descriptor opened like
/// FASTER's own Linux device (<c>O_DIRECT | O_DSYNC</c>: a completed write is durable, with no copy through the page
/// cache; on a file system that refuses <c>O_DIRECT</c>, such as tmpfs, <c>O_DSYNC</c> alone: see
/// <see cref="DurableFile.OpenSegment"/>); reads through a plain read-only one (the page cache: see
/// <see cref="GetReadHandle"/>). Each write or read is one synchronous <c>pwrite</c>/<c>pread</c> on the log's I/O
/// thread: one hand-off per I/O instead of FASTER's <c>Task.Run</c>, async <c>FileStream</c> and <c>FlushAsync</c> chain,
/// which costs a durable commit several thread hops (docs/benchmarks.md). Errors are reported to FASTER through the
/// completion callback's error code.
/// </summary>
internal sealed unsafe class DirectFileDevice : StorageDeviceBase
{
    private const int Sector = 512;

    [ThreadStatic]
    private static List<Operation>? t_deferred;

    [ThreadStatic]
    private static bool t_deferring;

    private readonly ConcurrentDictionary<int, SafeFileHandle> _handles = new();
    private readonly ConcurrentDictionary<int, SafeFileHandle> _readHandles = new();
    private readonly LogIoThread _io;
    private readonly Lock _openLock = new();
    private volatile bool _disposed;

    public DirectFileDevice(string basePath, LogIoThread io)
        : base(basePath, Sector, Devices.CAPACITY_UNSPECIFIED)
    {
        _io = io;
        var segments = SegmentFiles.List(Path.GetDirectoryName(Path.GetFullPath(basePath))!);
        if (segments.Count > 0)
        {
            startSegment = segments.Keys.Min();
            endSegment = segments.Keys.Max();
        }
    }

    public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite, DeviceIOCompletionCallback callback, object context)
    {
        HandleCapacity(segmentId);
        var operation = new Operation(this, write: true, sourceAddress, segmentId, destinationAddress, numBytesToWrite, callback, context);
        if (t_deferring)
        {
            (t_deferred ??= []).Add(operation);
        }
        else
        {
            _io.Post(operation);
        }
    }

    /// <summary>
    /// Until <see cref="RunDeferredWrites"/>, writes issued on this thread are kept instead of handed to the log's thread:
    /// the group commit's leader issues its commit under the append lock, then performs the commit's write itself once
    /// the lock is released, with no thread hand-off (docs/benchmarks.md).
    /// </summary>
    public static void DeferWrites() => t_deferring = true;

    /// <summary>
    /// Performs the writes deferred since <see cref="DeferWrites"/>, in order: on this thread when the log's thread has
    /// no write queued or running, else queued behind those (a write never overtakes an earlier one: the recovery scan
    /// takes an intact commit record as proof that everything before it was written, docs/log-format.md).
    /// </summary>
    public static void RunDeferredWrites()
    {
        t_deferring = false;
        var deferred = t_deferred;
        if (deferred is not { Count: > 0 })
        {
            return;
        }

        var operations = deferred.ToArray();
        deferred.Clear();
        var io = operations[0].Device._io;
        var done = 0;
        lock (io.WriteOrder)
        {
            if (io.Pending == 0)
            {
                for (; done < operations.Length; done++)
                {
                    operations[done].Transfer();
                }
            }
        }

        for (var i = 0; i < done; i++)
        {
            operations[i].Complete();
        }

        for (var i = done; i < operations.Length; i++)
        {
            io.Post(operations[i]);
        }
    }

    public override void ReadAsync(int segmentId, ulong sourceAddress, IntPtr destinationAddress, uint readLength, DeviceIOCompletionCallback callback, object context)
        => _io.Post(new Operation(this, write: false, destinationAddress, segmentId, sourceAddress, readLength, callback, context));

    public override void RemoveSegmentAsync(int segment, AsyncCallback callback, IAsyncResult result)
    {
        RemoveSegment(segment);
        callback(result);
    }

    public override void RemoveSegment(int segment)
    {
        if (_handles.TryRemove(segment, out var handle))
        {
            handle.Dispose();
        }

        if (_readHandles.TryRemove(segment, out var reader))
        {
            reader.Dispose();
        }

        try
        {
            File.Delete(GetSegmentFilename(FileName, segment));
        }
        catch (IOException)
        {
            // Deleted already, or busy: recovery ignores segments before the begin address and deletes them.
        }
    }

    public override long GetFileSize(int segment)
    {
        if (segmentSize > 0)
        {
            return segmentSize;
        }

        var path = GetSegmentFilename(FileName, segment);
        return File.Exists(path) ? new FileInfo(path).Length : 0;
    }

    public override void Dispose()
    {
        _disposed = true;
        foreach (var handle in _handles.Values.Concat(_readHandles.Values))
        {
            handle.Dispose();
        }

        _handles.Clear();
        _readHandles.Clear();
    }

    private SafeFileHandle GetWriteHandle(int segment)
    {
        if (_handles.TryGetValue(segment, out var handle))
        {
            return handle;
        }

        lock (_openLock)
        {
            if (!_handles.TryGetValue(segment, out handle))
            {
                handle = DurableFile.OpenSegment(GetSegmentFilename(FileName, segment), create: true);
                _handles[segment] = handle;
            }

            return handle;
        }
    }

    /// <summary>
    /// Reads go through the page cache (a plain read-only handle), not <c>O_DIRECT</c>: recovery reads what the
    /// verification pass has just read into the cache (sessions at rest, the analysis scan, replay), and the kernel reads
    /// ahead for the sequential scan. Only committed bytes are read; a direct write invalidates the cached pages it
    /// covers, and rewrites the committed part of a tail sector unchanged, so a read never sees other bytes
    /// (docs/log-format.md).
    /// </summary>
    private SafeFileHandle? GetReadHandle(int segment)
    {
        if (_readHandles.TryGetValue(segment, out var handle))
        {
            return handle;
        }

        lock (_openLock)
        {
            if (!_readHandles.TryGetValue(segment, out handle))
            {
                var path = GetSegmentFilename(FileName, segment);
                if (!File.Exists(path))
                {
                    return null;
                }

                handle = File.OpenHandle(path, FileMode.Open, FileAccess.Read, FileShare.ReadWrite | FileShare.Delete);
                _readHandles[segment] = handle;
            }

            return handle;
        }
    }

    private sealed class Operation(
        DirectFileDevice device, bool write, IntPtr buffer, int segment, ulong offset, uint length, DeviceIOCompletionCallback callback, object context)
        : IThreadPoolWorkItem
    {
        private uint _errorCode;
        private int _transferred;

        public DirectFileDevice Device => device;

        public void Execute()
        {
            if (write)
            {
                lock (device._io.WriteOrder)
                {
                    Transfer();
                }
            }
            else
            {
                Transfer();
            }

            Complete();
        }

        /// <summary>The write or read itself; a write runs under <see cref="LogIoThread.WriteOrder"/>.</summary>
        public void Transfer()
        {
            try
            {
                ObjectDisposedException.ThrowIf(device._disposed, device);
                var span = new Span<byte>((void*)buffer, (int)length);
                if (write)
                {
                    RandomAccess.Write(device.GetWriteHandle(segment), span, (long)offset);
                    _transferred = (int)length;
                }
                else if (device.GetReadHandle(segment) is { } handle)
                {
                    // A short read at the end of a file is fine: FASTER reads whole sectors past a partial tail. A read
                    // that ends off a sector boundary ended at the end of the file.
                    int read;
                    while (_transferred < span.Length && _transferred % Sector == 0
                           && (read = RandomAccess.Read(handle, span[_transferred..], (long)offset + _transferred)) > 0)
                    {
                        _transferred += read;
                    }
                }
            }
            catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ObjectDisposedException)
            {
                _errorCode = ex is IOException { HResult: var hr } && (hr & 0xFFFF) != 0 ? (uint)(hr & 0xFFFF) : uint.MaxValue;
                _transferred = 0;
            }
        }

        /// <summary>Tells FASTER (outside the write lock: its callback may issue the next I/O).</summary>
        public void Complete() => callback(_errorCode, (uint)_transferred, context);
    }
}
