using FASTER.core;
using PersistentServices.Log;

namespace PersistentServices.Tests.TestSupport;

/// <summary>How a <see cref="FaultInjectingDevice"/> fails a write.</summary>
public enum WriteFault
{
    None,

    /// <summary>The write is not performed and reports an error (EIO, or ENOSPC for a full disk).</summary>
    FailBeforeWrite,

    /// <summary>The bytes reach the file but the write reports an error, as when the flush after it fails.</summary>
    FailAfterWrite,
}

/// <summary>Wraps a FASTER device and fails writes on demand (the storage-fault tests; cf. FASTER's SimulatedFlakyDevice).</summary>
internal sealed class FaultInjectingDevice : DelegatingDevice
{
    public const uint Eio = 5;
    public const uint Enospc = 28;

    private volatile int _fault;

    public FaultInjectingDevice(IDevice inner)
        : base(inner)
    {
    }

    public uint ErrorCode { get; set; } = Eio;

    public WriteFault Fault
    {
        get => (WriteFault)_fault;
        set => _fault = (int)value;
    }

    public int FailedWrites => _failedWrites;

    private int _failedWrites;

    public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite, DeviceIOCompletionCallback callback, object context)
    {
        switch (Fault)
        {
            case WriteFault.FailBeforeWrite:
                Interlocked.Increment(ref _failedWrites);
                callback(ErrorCode, 0, context);
                return;
            case WriteFault.FailAfterWrite:
                Inner.WriteAsync(sourceAddress, segmentId, destinationAddress, numBytesToWrite, (_, _, ctx) =>
                {
                    Interlocked.Increment(ref _failedWrites);
                    callback(ErrorCode, 0, ctx);
                }, context);
                return;
            default:
                Inner.WriteAsync(sourceAddress, segmentId, destinationAddress, numBytesToWrite, callback, context);
                return;
        }
    }
}
