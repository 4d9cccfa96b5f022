using Microsoft.CodeAnalysis;

namespace PersistentServices.Generators.Replay;

/// <summary>
/// One use that replay cannot reproduce (PS0102, PS0201 or PS0202), found in persistent code or in a method it calls.
/// The chain of calls is added when it is reported (<see cref="CreateDiagnostic"/>).
/// </summary>
internal sealed class ReplayFinding
{
    private ReplayFinding(DiagnosticDescriptor descriptor, string subject, string detail, string how, StatePlace? place, Location location)
    {
        Descriptor = descriptor;
        Subject = subject;
        Detail = detail;
        How = how;
        Place = place;
        Location = location;
        Key = descriptor.Id + "|" + subject + "|" + detail + "|" + how + "|" + (place?.Kind == StatePlaceKind.This ? "this" : "");
    }

    public DiagnosticDescriptor Descriptor { get; }

    /// <summary>PS0201/PS0202: the API (<c>DateTime.UtcNow</c>); PS0102: the place written (<c>Plain.Counter</c>).</summary>
    public string Subject { get; }

    /// <summary>PS0202: why replay cannot reproduce it; PS0102: what the place is; PS0201: empty.</summary>
    public string Detail { get; }

    /// <summary>PS0102: how the place is written ("incremented", "changed by List&lt;T&gt;.Add()").</summary>
    public string How { get; }

    /// <summary>PS0102: the place written; null for the other rules.</summary>
    public StatePlace? Place { get; }

    /// <summary>Where the use is (in persistent code, or in the called method).</summary>
    public Location Location { get; }

    /// <summary>Identifies the finding for de-duplication (the location is not part of it).</summary>
    public string Key { get; }

    /// <summary>True for a write to a field of <c>this</c> in a type that is not a singleton: it counts only when the object outlives the request.</summary>
    public bool DependsOnReceiver => Place?.Kind == StatePlaceKind.This;

    /// <summary>True for PS0202, which read-only code does not report (read-only requests are not replayed).</summary>
    public bool IsExternalInput => ReferenceEquals(Descriptor, Descriptors.ExternalInput);

    public static ReplayFinding Nondeterministic(string api, Location location)
        => new(Descriptors.NondeterministicApi, api, string.Empty, string.Empty, null, location);

    public static ReplayFinding External(string api, string explanation, Location location)
        => new(Descriptors.ExternalInput, api, explanation, string.Empty, null, location);

    public static ReplayFinding StateWrite(StatePlace place, string how, Location location)
        => new(Descriptors.UnloggedState, place.Text, place.Description, how, place, location);

    /// <summary>
    /// This finding (a write to a field of <c>this</c>) seen from a caller whose receiver is <paramref name="holder"/>:
    /// the object held there is changed.
    /// </summary>
    public ReplayFinding ThroughHolder(StatePlace holder)
        => StateWrite(holder, "changed ('" + Place!.Name + "' " + How + ")", Location);

    public Diagnostic CreateDiagnostic(Location location, string chain, Location? useLocation)
    {
        var additional = useLocation is null ? null : new[] { useLocation };
        object[] arguments = Descriptor.Id switch
        {
            "PS0102" => [Subject, Detail, How, chain],
            "PS0202" => [Subject, chain, Detail],
            _ => [Subject, chain],
        };
        return Diagnostic.Create(Descriptor, location, additional, arguments);
    }
}
