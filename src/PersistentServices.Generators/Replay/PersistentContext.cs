using Microsoft.CodeAnalysis;

namespace PersistentServices.Generators.Replay;

/// <summary>Where an operation in persistent code stands: what made it persistent, and whether it is read-only.</summary>
internal sealed class PersistentContext
{
    public PersistentContext(ISymbol containingSymbol, SyntaxNode? root, bool readOnly)
    {
        ContainingSymbol = containingSymbol;
        Root = root;
        ReadOnly = readOnly;
    }

    /// <summary>The member the operation is in (a method, accessor, constructor, field with an initializer).</summary>
    public ISymbol ContainingSymbol { get; }

    /// <summary>
    /// The lambda or local function that made the code persistent (minimal APIs); null when the member or its type did.
    /// A variable declared outside it and written inside it outlives the request (the endpoint keeps it).
    /// </summary>
    public SyntaxNode? Root { get; }

    /// <summary>True inside a <c>[PersistentReadOnly]</c> method, lambda or local function: read-only requests are not replayed.</summary>
    public bool ReadOnly { get; }
}
