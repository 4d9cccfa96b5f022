using FASTER.core;

namespace PersistentServices.Log;

/// <summary>An <see cref="IDevice"/> that forwards every call to an inner device; decorators override what they change.</summary>
internal abstract class DelegatingDevice : IDevice
{
    protected DelegatingDevice(IDevice inner) => Inner = inner;

    protected IDevice Inner { get; }

    public uint SectorSize => Inner.SectorSize;

    public string FileName => Inner.FileName;

    public long Capacity => Inner.Capacity;

    public long SegmentSize => Inner.SegmentSize;

    public int StartSegment => Inner.StartSegment;

    public int EndSegment => Inner.EndSegment;

    public int ThrottleLimit
    {
        get => Inner.ThrottleLimit;
        set => Inner.ThrottleLimit = value;
    }

    public virtual void Initialize(long segmentSize, LightEpoch? epoch = null, bool omitSegmentIdFromFilename = false)
        => Inner.Initialize(segmentSize, epoch, omitSegmentIdFromFilename);

    public bool TryComplete() => Inner.TryComplete();

    public bool Throttle() => Inner.Throttle();

    public virtual void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite, DeviceIOCompletionCallback callback, object context)
        => Inner.WriteAsync(sourceAddress, segmentId, destinationAddress, numBytesToWrite, callback, context);

    public virtual void ReadAsync(int segmentId, ulong sourceAddress, IntPtr destinationAddress, uint readLength, DeviceIOCompletionCallback callback, object context)
        => Inner.ReadAsync(segmentId, sourceAddress, destinationAddress, readLength, callback, context);

    // FASTER's allocator uses the direct-addressing overloads; route them through the segmented ones (as
    // StorageDeviceBase does) so that a decorator's overrides see every read and write.
    public void WriteAsync(IntPtr alignedSourceAddress, ulong alignedDestinationAddress, uint numBytesToWrite, DeviceIOCompletionCallback callback, object context)
    {
        var (segment, offset) = Split(alignedDestinationAddress);
        WriteAsync(alignedSourceAddress, segment, offset, numBytesToWrite, callback, context);
    }

    public void ReadAsync(ulong alignedSourceAddress, IntPtr alignedDestinationAddress, uint aligned_read_length, DeviceIOCompletionCallback callback, object context)
    {
        var (segment, offset) = Split(alignedSourceAddress);
        ReadAsync(segment, offset, alignedDestinationAddress, aligned_read_length, callback, context);
    }

    private (int Segment, ulong Offset) Split(ulong address)
    {
        var segmentSize = Inner.SegmentSize;
        if (segmentSize <= 0)
        {
            return (0, address);
        }

        var bits = System.Numerics.BitOperations.Log2((ulong)segmentSize);
        return ((int)(address >> bits), address & ((ulong)segmentSize - 1));
    }

    public void TruncateUntilAddressAsync(long toAddress, AsyncCallback callback, IAsyncResult result) => Inner.TruncateUntilAddressAsync(toAddress, callback, result);

    public void TruncateUntilAddress(long toAddress) => Inner.TruncateUntilAddress(toAddress);

    public void TruncateUntilSegmentAsync(int toSegment, AsyncCallback callback, IAsyncResult result) => Inner.TruncateUntilSegmentAsync(toSegment, callback, result);

    public void TruncateUntilSegment(int toSegment) => Inner.TruncateUntilSegment(toSegment);

    public void RemoveSegmentAsync(int segment, AsyncCallback callback, IAsyncResult result) => Inner.RemoveSegmentAsync(segment, callback, result);

    public void RemoveSegment(int segment) => Inner.RemoveSegment(segment);

    public long GetFileSize(int segment) => Inner.GetFileSize(segment);

    public void Reset() => Inner.Reset();

    public void Dispose()
    {
        Dispose(true);
        GC.SuppressFinalize(this);
    }

    protected virtual void Dispose(bool disposing)
    {
        if (disposing)
        {
            Inner.Dispose();
        }
    }
}

/// <summary>
/// FASTER's Linux device writes with O_DIRECT | O_SYNC, so a completed write is durable, but it creates segment
/// files lazily and never flushes the directory. This decorator creates a segment's file and fsyncs the directory
/// before the first write into it, so a durable write never lives in a file whose directory entry is not.
/// </summary>
internal sealed class SegmentDurabilityDevice : DelegatingDevice
{
    private readonly HashSet<int> _durableSegments = [];
    private readonly Lock _gate = new();

    private readonly UnixFileMode _fileMode;

    public SegmentDurabilityDevice(IDevice inner, UnixFileMode fileMode = DurableFile.OwnerOnly)
        : base(inner)
    {
        _fileMode = fileMode;
    }

    public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite, DeviceIOCompletionCallback callback, object context)
    {
        try
        {
            EnsureSegmentFile(segmentId);
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException)
        {
            callback(uint.MaxValue, 0, context);
            return;
        }

        Inner.WriteAsync(sourceAddress, segmentId, destinationAddress, numBytesToWrite, callback, context);
    }

    private void EnsureSegmentFile(int segmentId)
    {
        lock (_gate)
        {
            if (_durableSegments.Contains(segmentId))
            {
                return;
            }

            var path = SegmentFiles.PathOf(FileName, segmentId);
            if (!File.Exists(path))
            {
                using (new FileStream(path, DurableFile.Create(FileMode.OpenOrCreate, FileAccess.Write, FileShare.ReadWrite, _fileMode)))
                {
                }

                DurableFile.FsyncDirectory(Path.GetDirectoryName(Path.GetFullPath(path))!);
            }

            _durableSegments.Add(segmentId);
        }
    }
}

/// <summary>
/// The outermost device of every log: a write that reports an error faults the log before FASTER processes the
/// failure (FASTER then never calls the commit back), so no waiter on the failed range is ever released.
/// </summary>
internal sealed class FaultObservingDevice(IDevice inner, Action<uint> onWriteError) : DelegatingDevice(inner)
{
    public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite, DeviceIOCompletionCallback callback, object context)
        => Inner.WriteAsync(sourceAddress, segmentId, destinationAddress, numBytesToWrite, (error, bytes, state) =>
        {
            if (error != 0)
            {
                onWriteError(error);
            }

            callback(error, bytes, state);
        }, context);
}
