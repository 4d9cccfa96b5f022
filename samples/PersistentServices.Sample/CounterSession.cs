using System.Collections.Immutable;

namespace PersistentServices.Sample;

/// <summary>
/// A per-session counter used by the minimal API below and by the crash harness: every executed "add" is recorded in
/// <see cref="Operations"/>, so a client can check from the outside that each acknowledged operation happened exactly once.
/// Registered as a singleton: its properties are per session whatever the instance.
/// </summary>
public sealed partial class CounterSession
{
    [SessionState]
    public partial long Total { get; set; }

    [SessionState]
    public partial ImmutableList<string>? Operations { get; set; }

    public CounterReply Add(AddToCounter body)
    {
        Total += body.Amount;
        Operations = (Operations ?? []).Add(body.OpId);
        return new CounterReply(Total, Operations.Count);
    }

    public CounterState Read() => new(Total, Operations ?? []);
}

public sealed record AddToCounter(string OpId, long Amount);

public sealed record CounterReply(long Total, int Operations);

public sealed record CounterState(long Total, IReadOnlyList<string> Operations);
