using Microsoft.CodeAnalysis;

namespace PersistentServices.Generators.Replay;

/// <summary>How the object a called method runs on relates to the caller.</summary>
internal enum ReceiverKind
{
    /// <summary>A static method, a new object, or a receiver that does not outlive the request (a local, a parameter).</summary>
    None,

    /// <summary>The caller's own <c>this</c>: writes to its fields are the caller's.</summary>
    This,

    /// <summary>An object held in memory that outlives the request (<see cref="CallEdge.Holder"/>).</summary>
    Holder,
}

/// <summary>A call from one method into a method whose source is in the same compilation.</summary>
internal sealed class CallEdge
{
    public CallEdge(IMethodSymbol target, ReceiverKind receiver, StatePlace? holder)
    {
        Target = target;
        Receiver = receiver;
        Holder = holder;
    }

    public IMethodSymbol Target { get; }

    public ReceiverKind Receiver { get; }

    /// <summary>Where the receiver is held, when <see cref="Receiver"/> is <see cref="ReceiverKind.Holder"/>.</summary>
    public StatePlace? Holder { get; }
}
