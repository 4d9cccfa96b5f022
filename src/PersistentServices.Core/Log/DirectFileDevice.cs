using System.Collections.Concurrent;
using System.Runtime.InteropServices;
using FASTER.core;
using Microsoft.Win32.SafeHandles;

namespace PersistentServices.Log;

/// <summary>
/// A FASTER device over local segment files (<c>{base}.{segment}</c>). Writes go through a descriptor opened like
/// FASTER's own Linux device (<c>O_DIRECT | O_DSYNC</c>: a completed write is durable, with no copy through the page
/// cache; on a file system that refuses <c>O_DIRECT</c>, such as tmpfs, <c>O_DSYNC</c> alone: see
/// <see cref="DurableFile.OpenSegment(string, bool)"/>); reads through a plain read-only one (the page cache: see
/// <see cref="GetReadHandle"/>). Each write or read is one synchronous <c>pwrite</c>/<c>pread</c> on the log's I/O
/// thread: one hand-off per I/O instead of FASTER's <c>Task.Run</c>, async <c>FileStream</c> and <c>FlushAsync</c> chain,
/// which costs a durable commit several thread hops (docs/benchmarks.md). Errors are reported to FASTER through the
/// completion callback's error code.
/// <para>
/// Zeroed space ahead of the tail: a write that makes a file longer must also make the new length durable (one more
/// disk write and flush per commit), a write over existing bytes need not. So the device keeps the space just past the
/// log's tail written with zeros (<see cref="LogOptions.ZeroFillBytes"/> at a time, on a thread-pool thread, never under a
/// commit's write): a commit's write lands on bytes that already exist. As PostgreSQL zero-fills its WAL segments
/// (<c>wal_init_zero</c>). The log reads zeros after its data as the end of the data (docs/log-format.md). Only where the
/// handle writes with <c>O_DIRECT</c>: on tmpfs zeros would only take memory.
/// </para>
/// </summary>
internal sealed unsafe class DirectFileDevice : StorageDeviceBase
{
    /// <summary>Bytes zeroed ahead of the tail at a time; a fill starts when less than this is left.</summary>
    internal const int DefaultZeroFillBytes = 4 << 20;

    private const int Sector = 512;
    private const int ZeroBufferBytes = 1 << 20;
    private const int FileSystemBlock = 4096;

    private static readonly Lazy<IntPtr> ZeroBuffer = new(() =>
    {
        var buffer = NativeMemory.AlignedAlloc(ZeroBufferBytes, FileSystemBlock);
        new Span<byte>(buffer, ZeroBufferBytes).Clear();
        return (IntPtr)buffer;
    });

    [ThreadStatic]
    private static List<Operation>? t_deferred;

    [ThreadStatic]
    private static bool t_deferring;

    private readonly UnixFileMode _fileMode;
    private readonly ConcurrentDictionary<int, SafeFileHandle> _handles = new();
    private readonly ConcurrentDictionary<int, SafeFileHandle> _readHandles = new();
    private readonly LogIoThread _io;
    private readonly Lock _openLock = new();
    private readonly HashSet<int> _directSegments = [];
    private readonly long _zeroFillBytes;
    // The zero fill's state, guarded by _zeroGate (Monitor: a write that would reach a fill in flight waits for it).
    private readonly object _zeroGate = new();
    private int _zeroSegment = -1;
    private long _zeroedUntil;
    private long _fillFrom = -1;
    private int _fillSegment = -1;
    private bool _fillRunning;
    private int _fillGeneration;
    private volatile bool _disposed;

    /// <summary>Creates the device.</summary>
    /// <param name="basePath">The segment files' base path.</param>
    /// <param name="io">The log's I/O thread.</param>
    /// <param name="zeroFillBytes">Bytes zeroed ahead of the tail at a time; 0 turns the zero fill off.</param>
    /// <param name="fileMode">The mode new segment files are created with (<see cref="LogOptions.FileMode"/>).</param>
    public DirectFileDevice(string basePath, LogIoThread io, long zeroFillBytes = DefaultZeroFillBytes, UnixFileMode fileMode = DurableFile.OwnerOnly)
        : base(basePath, Sector, Devices.CAPACITY_UNSPECIFIED)
    {
        if (zeroFillBytes < 0 || zeroFillBytes % FileSystemBlock != 0)
        {
            throw new ArgumentOutOfRangeException(nameof(zeroFillBytes), zeroFillBytes, $"Zero fill must be a multiple of {FileSystemBlock} bytes, or 0.");
        }

        _io = io;
        _zeroFillBytes = zeroFillBytes;
        _fileMode = fileMode;
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
        lock (_zeroGate)
        {
            // A queued fill never starts; a running one finishes (or fails) before the files close.
            CancelQueuedFill();
            while (_fillRunning)
            {
                Monitor.Wait(_zeroGate);
            }
        }

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
                handle = DurableFile.OpenSegment(GetSegmentFilename(FileName, segment), create: true, _fileMode, out var direct);
                if (direct)
                {
                    _directSegments.Add(segment);
                }

                _handles[segment] = handle;
            }

            return handle;
        }
    }

    /// <summary>
    /// Before a segment write that reaches the range of a zero fill (rare: the fill runs megabytes ahead): a fill still
    /// queued is dropped, a running one is waited for (a few milliseconds), so zeros never land on the log's data.
    /// </summary>
    private void BeforeWrite(int segment, long end)
    {
        if (_zeroFillBytes == 0)
        {
            return;
        }

        lock (_zeroGate)
        {
            while (_fillFrom >= 0 && _fillSegment == segment && end > _fillFrom)
            {
                if (!_fillRunning)
                {
                    CancelQueuedFill();
                    return;
                }

                Monitor.Wait(_zeroGate);
            }
        }
    }

    /// <summary>Drops a fill that is queued and not running (under <see cref="_zeroGate"/>).</summary>
    private void CancelQueuedFill()
    {
        if (_fillFrom >= 0 && !_fillRunning)
        {
            _fillFrom = -1;
            _fillSegment = -1;
            _fillGeneration++;
        }
    }

    /// <summary>After a successful segment write ending at <paramref name="end"/>: starts a zero fill when the zeroed space ahead runs short.</summary>
    private void AfterWrite(int segment, long end, SafeFileHandle handle)
    {
        if (_zeroFillBytes == 0 || _disposed)
        {
            return;
        }

        long from, to;
        int generation;
        lock (_zeroGate)
        {
            if (segment != _zeroSegment)
            {
                if (segment < _zeroSegment || !IsDirect(segment))
                {
                    return;
                }

                // The tail entered this segment: what the file holds (a restart's earlier fill included) is written.
                // Never an error for the write that just succeeded: without the length, no fill.
                long length;
                try
                {
                    length = RandomAccess.GetLength(handle);
                }
                catch (Exception ex) when (ex is IOException or ObjectDisposedException)
                {
                    return;
                }

                _zeroSegment = segment;
                _zeroedUntil = length & ~(long)(FileSystemBlock - 1);
            }

            if (_fillFrom >= 0 || _zeroedUntil - end >= _zeroFillBytes || _zeroedUntil >= segmentSize)
            {
                return;
            }

            from = Math.Max(_zeroedUntil, (end + FileSystemBlock - 1) & ~(long)(FileSystemBlock - 1));
            to = Math.Min(from + _zeroFillBytes, segmentSize);
            if (from >= to)
            {
                return;
            }

            _fillSegment = segment;
            _fillFrom = from;
            generation = ++_fillGeneration;
        }

        ThreadPool.UnsafeQueueUserWorkItem(
            static state => state.Device.Fill(state.Generation, state.Segment, state.Handle, state.From, state.To),
            (Device: this, Generation: generation, Segment: segment, Handle: handle, From: from, To: to),
            preferLocal: false);
    }

    private bool IsDirect(int segment)
    {
        lock (_openLock)
        {
            return _directSegments.Contains(segment);
        }
    }

    /// <summary>Writes zeros over [<paramref name="from"/>, <paramref name="to"/>) of a segment, past the log's tail.</summary>
    private void Fill(int generation, int segment, SafeFileHandle handle, long from, long to)
    {
        lock (_zeroGate)
        {
            if (generation != _fillGeneration || _fillFrom < 0 || _disposed)
            {
                return; // dropped while queued
            }

            _fillRunning = true;
        }

        var filled = from;
        try
        {
            var zeros = ZeroBuffer.Value;
            while (filled < to && !_disposed)
            {
                var length = (int)Math.Min(ZeroBufferBytes, to - filled);
                RandomAccess.Write(handle, new ReadOnlySpan<byte>((void*)zeros, length), filled);
                filled += length;
            }
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ObjectDisposedException)
        {
            // No space left, or the log is closing: the log's writes extend the file themselves, as without the fill. Try
            // again only once the tail has passed the range (a full disk is not retried on every commit).
            filled = to;
        }
        finally
        {
            lock (_zeroGate)
            {
                if (segment == _zeroSegment)
                {
                    _zeroedUntil = Math.Max(_zeroedUntil, filled);
                }

                _fillFrom = -1;
                _fillSegment = -1;
                _fillRunning = false;
                Monitor.PulseAll(_zeroGate);
            }
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
                    var handle = device.GetWriteHandle(segment);
                    device.BeforeWrite(segment, (long)offset + length);
                    RandomAccess.Write(handle, span, (long)offset);
                    _transferred = (int)length;
                    device.AfterWrite(segment, (long)offset + length, handle);
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
