namespace PersistentServices.Generators.Replay;

/// <summary>What kind of memory a write reaches (PS0102).</summary>
internal enum StatePlaceKind
{
    /// <summary>A static field or property: lives as long as the process.</summary>
    Static,

    /// <summary>An instance field or auto-property of a type registered as a singleton (or a [SharedState] class).</summary>
    Singleton,

    /// <summary>A local or parameter declared outside the persistent lambda that writes it (the endpoint lives on).</summary>
    Captured,

    /// <summary>A field of <c>this</c> in a type that is not a singleton: it outlives the request only when the object does.</summary>
    This,
}

/// <summary>A piece of memory that a write reaches: its display text (<c>Plain.Counter</c>) and what it is.</summary>
internal sealed class StatePlace
{
    public StatePlace(StatePlaceKind kind, string text, string name, string description)
    {
        Kind = kind;
        Text = text;
        Name = name;
        Description = description;
    }

    public StatePlaceKind Kind { get; }

    /// <summary>The place as the message shows it: <c>Plain.Counter</c>, <c>Counters._count</c>, <c>count</c>.</summary>
    public string Text { get; }

    /// <summary>The member's own name (<c>_count</c>), used when a write to <c>this</c> is attributed to the object's holder.</summary>
    public string Name { get; }

    /// <summary>What the place is, for the message: "a static field", "a field of the singleton 'Counters'".</summary>
    public string Description { get; }

    /// <summary>True when the memory outlives the request wherever the write happens.</summary>
    public bool Outlives => Kind != StatePlaceKind.This;
}
